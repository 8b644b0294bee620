"""`kgen.train_check.step_profile`: kernels grouped by kind from their names as real profiles name
them (cuBLAS, nvjet, CUTLASS, flash attention, Inductor's fused kernels, aten copies, kgen's
Triton kernels), and a real CPU profile summarised per step."""

import pytest
import torch

from kgen.train_check.step_profile import (
    KINDS,
    kernel_kind,
    profile_steps,
    profile_table,
    triton_kernel_names,
)

KGEN = {"_rmsnorm_fwd_tile", "_ce_fwd_chunks"}


@pytest.mark.parametrize(("name", "kind"), [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
     "5x_cublas", "matmul"),
    ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(Params)", "matmul"),
    ("aten::mm", "matmul"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)", "attention"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits>", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "inductor"),
    ("triton_per_fused__log_softmax_backward_data_nll_loss_backward_3", "inductor"),
    ("triton_poi_fused__to_copy_clone_3", "inductor copy/cast"),
    ("triton_poi_fused_clone_12", "inductor copy/cast"),
    ("triton_poi_fused__to_copy_7", "inductor copy/cast"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_"
     "cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}>>", "copy/fill"),
    ("Memset (Device)", "copy/fill"),
    ("Memcpy DtoD (Device -> Device)", "copy/fill"),
    ("_rmsnorm_fwd_tile", "kgen"),
    ("_ce_fwd_chunks_0", "kgen"),  # the compiler's suffix
    ("_rmsnorm_fwd_tiles_other", "other"),  # not a suffix of a kgen kernel's name: another kernel
    ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel>", "other"),
])
def test_each_kernel_name_gets_its_kind(name, kind):
    assert kernel_kind(name, KGEN) == kind


def test_a_cpu_profile_is_summarised_per_step_and_tabled():
    a, b = torch.randn(64, 64), torch.randn(64, 64)

    def step(x):
        (x @ b).float().clone().sum()

    found = profile_steps("toy", step, [a, a, a], "cpu")
    assert found.steps == 3 and [r.kind for r in found.rows] == list(KINDS)
    assert found.row("matmul").ms_per_step > 0 and found.row("matmul").launches_per_step == pytest.approx(1)
    assert found.row("copy/fill").launches_per_step >= 1
    assert found.total_ms == pytest.approx(sum(r.ms_per_step for r in found.rows))
    table = profile_table([found, found.model_copy(update={"label": "again"})])
    assert "| matmul |" in table and "toy ms" in table and "again launches" in table


def test_the_triton_kernels_of_a_module_are_named():
    import importlib.util

    from kgen.knowledge_base import SEED_KERNELS_DIR

    path = SEED_KERNELS_DIR / "triton" / "cross_entropy_forward.py"
    spec = importlib.util.spec_from_file_location("ce_seed_for_names", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert triton_kernel_names([module]) >= {"_ce_fwd_chunks", "_lse_of_columns"}
