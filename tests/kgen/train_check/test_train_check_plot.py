"""`kgen.train_check.plot`: the loss-curve picture is valid SVG whatever the losses hold."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from kgen.train_check.plot import loss_curves_svg

SVG = "{http://www.w3.org/2000/svg}"


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def test_each_run_is_drawn_in_both_panels_and_the_band_is_shaded() -> None:
    stock = [5.5, 5.4, 5.3, 5.25]
    runs = {"good": [5.5, 5.401, 5.299, 5.251], "planted": [5.52, 5.43, 5.33, 5.3]}
    root = _parse(loss_curves_svg("check", stock, runs, allowed=[1e-3, 2e-3, 2e-3, 3e-3]))
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 1 + 2 * len(runs)  # stock once, each run in the loss and the gap panel
    assert len(root.findall(f"{SVG}polygon")) == 1
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "good" in texts and "planted" in texts and "step 3" in texts


def test_a_run_that_went_non_finite_breaks_its_line_and_writes_no_nan() -> None:
    stock = [5.5, 5.4, 5.3, 5.2, 5.1]
    text = loss_curves_svg("diverged <run>", stock, {"kernels": [5.5, 5.4, math.nan, math.inf, 5.0]}, None)
    root = _parse(text)  # the title's < is escaped, or this would not parse
    assert "nan" not in text.lower() and "inf" not in text.replace("font", "")
    kernel_lines = [p for p in root.findall(f"{SVG}polyline") if p.get("stroke") != "#000000"]
    assert len(kernel_lines) == 2  # steps 0-1 in each panel; the lone step 4 is a dot
    assert len(root.findall(f"{SVG}circle")) == 2


def test_flat_and_empty_curves_still_make_a_picture() -> None:
    root = _parse(loss_curves_svg("flat", [1.0, 1.0], {"kernels": [1.0, 1.0]}, [0.0, 0.0]))
    assert root.findall(f"{SVG}polyline")
    assert _parse(loss_curves_svg("empty", [], {}, None)) is not None
