"""`auto`'s rule: float32 for small evaluations, bfloat16 where the device multiplies it natively,
float32 elsewhere; decided from the device's facts, with the metrics of every arithmetic."""

from __future__ import annotations

import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, arithmetic, choice
from benchmark.evaluation.sets import evaluation_sets

CPU = torch.device("cpu")
METRICS = ("recall", "mAP", "MAP@R", "R-Precision")


def collapsed(n: int = 1200, dim: int = 64, per_class: int = 6, seed: int = 0) -> torch.Tensor:
    """Classes around one large shared direction: every cosine above ≈ 0.85, positives ≈ 0.03
    above the negatives (a barely trained embedding)."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(n // per_class, dim, generator=gen))
    z = (
        centres.repeat_interleave(per_class, 0)
        + 1.5 * torch.randn(n, dim, generator=gen) / dim**0.5
    )
    shared = torch.nn.functional.normalize(torch.randn(dim, generator=gen), dim=0)
    return torch.nn.functional.normalize(z) + 3.0 * shared


def fake_flags(monkeypatch: pytest.MonkeyPatch, flags: set[str]) -> None:
    """These CPU flags, with oneDNN free to use them: built in and on (torch builds without it
    exist), and no ISA cap from the caller's shell."""
    monkeypatch.setattr(choice, "cpu_flags", lambda: flags)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", True)
    for name in arithmetic.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx2", "avx512f", "avx512_vnni"}, "float32"),  # AVX-512 without BF16: this Xeon
        ({"avx2"}, "float32"),  # Zen 3
        ({"avx512f", "avx512_bf16"}, "bfloat16"),  # Zen 4, Cooper Lake
        ({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "bfloat16"),  # Sapphire Rapids
        ({"asimd", "bf16"}, "bfloat16"),  # ARM with BF16 (Graviton 3, Neoverse V1)
        (set(), "float32"),  # no /proc/cpuinfo
    ],
)
def test_the_rule_takes_bfloat16_where_the_cpu_multiplies_it_natively(
    flags: set[str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_flags(monkeypatch, flags)
    sets = evaluation_sets("same_set", torch.randn(40, 8), torch.arange(40) % 4)
    monkeypatch.setattr(choice, "SMALL_MACS", 0)
    assert choice.choose(sets, CPU) == expected


@pytest.mark.parametrize(
    ("name", "cap", "expected"),
    [
        ("ONEDNN_MAX_CPU_ISA", "AVX2", "float32"),  # the house's emulation of an AVX2-only CPU
        ("ONEDNN_MAX_CPU_ISA", "avx512_core_vnni", "float32"),
        ("DNNL_MAX_CPU_ISA", "AVX512_CORE", "float32"),  # oneDNN's old name for the cap
        ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", "bfloat16"),
        ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX", "bfloat16"),
        ("ONEDNN_MAX_CPU_ISA", "ALL", "bfloat16"),
    ],
)
def test_the_rule_takes_float32_where_onednn_is_capped_below_bfloat16(
    name: str, cap: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capped below AVX512_CORE_BF16, oneDNN computes bfloat16 products in software, slower than
    float32's, whatever /proc/cpuinfo says (docs/benchmarks/evaluation.md has the figures)."""
    fake_flags(monkeypatch, {"avx512f", "avx512_bf16", "amx_bf16"})
    monkeypatch.setenv(name, cap)
    sets = evaluation_sets("same_set", torch.randn(40, 8), torch.arange(40) % 4)
    monkeypatch.setattr(choice, "SMALL_MACS", 0)
    assert choice.choose(sets, CPU) == expected


def test_the_rule_takes_float32_where_onednn_is_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_flags(monkeypatch, {"avx512f", "avx512_bf16", "amx_bf16"})
    sets = evaluation_sets("same_set", torch.randn(40, 8), torch.arange(40) % 4)
    monkeypatch.setattr(choice, "SMALL_MACS", 0)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    assert choice.choose(sets, CPU) == "float32"


@pytest.mark.parametrize(("major", "expected"), [(7, "float32"), (8, "bfloat16"), (9, "bfloat16")])
def test_the_rule_takes_bfloat16_on_gpus_of_compute_capability_8(
    major: int, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (major, 0))
    sets = evaluation_sets("same_set", torch.randn(40, 8), torch.arange(40) % 4)
    monkeypatch.setattr(choice, "SMALL_MACS", 0)
    assert choice.choose(sets, torch.device("cuda")) == expected


def test_a_small_evaluation_takes_float32_even_with_native_bfloat16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_flags(monkeypatch, {"avx512_bf16", "amx_bf16"})
    monkeypatch.delenv(arithmetic.ENV_VAR, raising=False)
    sets = evaluation_sets("same_set", torch.randn(40, 8), torch.arange(40) % 4)
    assert choice.product_macs(sets) == 40 * 41 // 2 * 8 < choice.SMALL_MACS
    assert choice.choose(sets, CPU) == "float32"
    ev = RetrievalEvaluator("same_set", (1,), device="cpu")
    ev.evaluate(torch.randn(40, 8), torch.arange(40) % 4)
    assert ev.last_backend == "torch-cpu-float32"


def test_product_macs_count_a_same_set_pair_once() -> None:
    x, labels = torch.randn(30, 4), torch.arange(30) % 3
    assert choice.product_macs(evaluation_sets("same_set", x, labels)) == 30 * 31 // 2 * 4
    g, g_labels = torch.randn(50, 4), torch.arange(50) % 3
    sets = evaluation_sets("query_gallery", x, labels, g, g_labels)
    assert choice.product_macs(sets) == 30 * 50 * 4


def test_cpu_flags_read_the_x86_and_arm_lines(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = {
        "x86": "processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\nbugs\t\t: spectre\n",
        "arm": "processor\t: 0\nFeatures\t: fp asimd bf16\n",
    }
    read = arithmetic.Path.read_text
    for kind, text in texts.items():
        monkeypatch.setattr(arithmetic.Path, "read_text", lambda self, text=text: text)
        flags = arithmetic.cpu_flags()
        assert ("avx512_bf16" in flags) == (kind == "x86") and ("bf16" in flags) == (kind == "arm")
    monkeypatch.setattr(arithmetic.Path, "read_text", read)

    def missing(self: object) -> str:
        raise OSError("no /proc here")

    monkeypatch.setattr(arithmetic.Path, "read_text", missing)
    assert arithmetic.cpu_flags() == set()


@pytest.mark.parametrize("flags", [{"avx2"}, {"avx512_bf16"}])
def test_auto_has_the_metrics_of_every_arithmetic(
    flags: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever arithmetic the rule picks, on collapsed data (most pairs in a low precision's
    band) the metrics are those of every named arithmetic, to the last digit."""
    x = collapsed(dim=256)
    labels = torch.arange(x.shape[0]) // 6
    monkeypatch.setattr(choice, "SMALL_MACS", 0)
    monkeypatch.delenv(arithmetic.ENV_VAR, raising=False)
    fake_flags(monkeypatch, flags)
    ev = RetrievalEvaluator("same_set", (1, 4), METRICS, device="cpu")
    got = ev.evaluate(x, labels)
    expected = "bfloat16" if "avx512_bf16" in flags else "float32"
    assert ev.last_backend == f"torch-cpu-{expected}"
    for name in ("float32", "bfloat16", "float16"):
        named = RetrievalEvaluator("same_set", (1, 4), METRICS, device="cpu", arithmetic=name)
        assert named.evaluate(x, labels) == got
