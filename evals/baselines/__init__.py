"""What a candidate is compared with: eager PyTorch, torch.compile and Liger, timed by a trusted job
(no candidate code in its process), kept across runs, merged into each candidate's bench."""
