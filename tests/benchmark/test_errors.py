"""A user's mistake gets a short answer from the shell: at most five lines that name the file,
key or value and the fix, a non-zero exit status, no traceback unless asked (`--debug`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmark import cli
from benchmark.errors import DEBUG_ENV, MAX_LINES, class_hint, read_yaml, shortened

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = str(ROOT / "experiments/synthetic/fine_grained/circle.yaml")


def shell(
    words: list[str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """`circlebench WORDS` as typed in a shell: (exit status, what it printed on stderr)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv(DEBUG_ENV, "0")  # restored after the test: --debug sets it
    monkeypatch.setattr(sys, "argv", ["circlebench", *words])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    code = stop.value.code
    err = capfd.readouterr().err
    if isinstance(code, str):  # SystemExit("message"): Python prints it, status 1
        err, code = err + code, 1
    return int(code or 0), err


def short(err: str) -> list[str]:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert 1 <= len(lines) <= MAX_LINES, err
    assert "Traceback" not in err
    return lines


def suite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> None:
    """A working folder whose only suite is `name`, holding `text`."""
    (tmp_path / "experiments/suites").mkdir(parents=True)
    (tmp_path / f"experiments/suites/{name}.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with the repository's experiments (suites, spaces, configs)."""
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_suite_that_is_not_yaml_names_its_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    suite_file(tmp_path, monkeypatch, "bad", "groups:\n  g: [\n")
    code, err = shell(["leaderboard", "--suite", "bad"], monkeypatch, capfd)
    assert code != 0
    assert "experiments/suites/bad.yaml: not valid YAML (line 3, column 1)" in short(err)[0]


def test_an_unknown_suite_key_lists_the_allowed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    suite_file(tmp_path, monkeypatch, "s", "groupz: {}\n")
    code, err = shell(["leaderboard", "--suite", "s"], monkeypatch, capfd)
    assert code != 0 and "unknown key(s) ['groupz']; allowed: [" in short(err)[0]


def test_a_config_that_is_not_yaml_names_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  loss: [\n")
    code, err = shell(["fit", "--config", str(bad)], monkeypatch, capfd)
    assert code != 0 and f"{bad}: not valid YAML (line 3, column 1)" in short(err)[0]


def test_an_unknown_loss_lists_the_losses(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    words = ["fit", "--config", SYNTHETIC, "--model.loss=losses.NoSuchLoss"]
    code, err = shell(words, monkeypatch, capfd)
    lines = short(err)
    assert code != 0 and "model.loss" in lines[0] and "NoSuchLoss" in err
    assert any(line.startswith("losses has: ") and "CircleLoss" in line for line in lines)


@pytest.mark.parametrize(
    ("words", "option"),
    [
        (["fit", "--config", SYNTHETIC, "--trainer.max_epoch=3"], "--trainer.max_epoch=3"),
        (["tune", "--config", SYNTHETIC, "--trial", "3"], "--trial"),
    ],
    ids=["fit", "tune"],
)
def test_an_abbreviated_option_is_refused(
    words: list[str],
    option: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    code, err = shell(words, monkeypatch, capfd)
    assert code == 2 and f"unrecognized arguments: {option}" in short(err)[0]


def test_a_missing_dataset_says_where_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A root without the split files (here: an empty folder) names the root and the fix."""
    config = str(ROOT / "experiments/cub200/circle.yaml")
    words = ["test", "--config", config, f"--data.init_args.root={tmp_path}"]
    words += ["--model.embedder.init_args.pretrained=false", "--wandb=false"]
    code, err = shell(words, monkeypatch, capfd)
    lines = short(err)
    assert code != 0 and f"CUB-200-2011 not found in {tmp_path}" in lines[0]
    assert "circlebench data download cub200" in err


def test_a_corrupt_checkpoint_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.ckpt"
    bad.write_text("not a checkpoint")
    words = ["test", "--config", SYNTHETIC, f"--ckpt_path={bad}", "--wandb=false"]
    code, err = shell(words, monkeypatch, capfd)
    assert code != 0 and f"{bad} is not a PyTorch checkpoint" in short(err)[0]


def test_a_foreign_checkpoint_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import torch

    foreign = tmp_path / "resnet.ckpt"
    torch.save({"weight": torch.zeros(2)}, foreign)  # a state dict, not a fit's checkpoint
    words = ["test", "--config", SYNTHETIC, f"--ckpt_path={foreign}", "--wandb=false"]
    code, err = shell(words, monkeypatch, capfd)
    assert code != 0 and "is not a checkpoint of `circlebench fit`" in short(err)[0]


def test_a_missing_results_folder_says_what_to_run(
    project: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    words = ["leaderboard", "--suite", "quick", "--aggregate-only", "--no-wandb"]
    code, err = shell(words, monkeypatch, capfd)
    lines = short(err)
    assert code != 0 and "results/suites/quick/rows.csv" in lines[0]
    assert "circlebench leaderboard --suite quick` first" in err


def test_a_missing_search_space_names_the_file(
    project: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    words = ["tune", "--config", SYNTHETIC, "--space", "nowhere.yaml", "--no-wandb"]
    code, err = shell(words, monkeypatch, capfd)
    assert code != 0 and "no search space at nowhere.yaml" in short(err)[0]


def test_debug_shows_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    suite_file(tmp_path, monkeypatch, "bad", "groups:\n  g: [\n")
    monkeypatch.setattr(sys, "argv", ["circlebench", "--debug", "leaderboard", "--suite", "bad"])
    monkeypatch.setenv(DEBUG_ENV, "0")  # restored after the test: --debug sets it
    with pytest.raises(ValueError, match="not valid YAML"):
        cli.main()


def test_a_message_is_cut_to_five_lines_with_its_hint() -> None:
    text = shortened("\n".join(f"line {i}" for i in range(9)), "hint a\nhint b")
    assert text.splitlines() == ["line 0 [...]", "line 7", "line 8", "hint a", "hint b"]
    assert shortened("one line", "hint") == "one line\nhint"


def test_the_class_hint_lists_a_modules_classes() -> None:
    hint = class_hint("module 'losses' has no attribute 'NoSuchLoss'")
    assert hint.startswith("losses has: ") and "TripletLoss" in hint
    assert class_hint("another message") == ""


def test_read_yaml_names_the_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("a: 1\n")
    bad.write_text("a: [1,\n")
    assert read_yaml(good) == {"a": 1}
    with pytest.raises(ValueError, match=r"bad.yaml: not valid YAML \(line 2, column 1\)"):
        read_yaml(bad)
