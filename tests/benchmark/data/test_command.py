"""`circlebench data list|info|verify|download` on tiny layouts; no network but a refused port."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import tarfile
from pathlib import Path

import pytest

from benchmark.cli import main as circlebench
from benchmark.data.command import main
from datamodules import CUB200DataModule
from tests.datamodules import _layouts


def test_list_shows_every_dataset_with_official_counts(capsys: pytest.CaptureFixture) -> None:
    circlebench(["data", "list"])
    out = capsys.readouterr().out
    for text in [
        "cub200",
        "cars196",
        "sop",
        "market1501",
        "msmt17",
        "15,913 / 751",
        "1,10,100,1000",
    ]:
        assert text in out


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cub200", "data.caltech.edu"),
        ("msmt17", "signed agreement"),
        ("market1501", "bounding_box_train/"),
    ],
)
def test_info_gives_source_licence_and_layout(
    name: str, expected: str, capsys: pytest.CaptureFixture
) -> None:
    main(["info", name])
    out = capsys.readouterr().out
    assert expected in out and "licence:" in out and "expected layout" in out


def test_unknown_dataset_lists_the_choices() -> None:
    with pytest.raises(SystemExit, match=r"unknown dataset 'cub'; choose one of \['cars196'"):
        main(["info", "cub"])


def test_verify_subset_passes_and_reports_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = _layouts.write_cub(tmp_path)
    main(["verify", "cub200", "--root", str(root), "--train-classes", "2"])
    out = capsys.readouterr().out
    assert "sizes not compared" in out and "cub200: OK" in out
    assert "│ train │ 5" in out and "│ query │ 9" in out


def test_verify_lists_missing_and_unreadable_files(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = _layouts.write_cub(tmp_path)
    gone = root / "images" / "001.Bird_1" / "Bird_1_0001_790001.jpg"
    gone.unlink()
    cut = root / "images" / "004.Bird_4" / "Bird_4_0002_790011.jpg"
    cut.write_bytes(cut.read_bytes()[:100])
    argv = ["verify", "cub200", "--root", str(tmp_path), "--train-classes", "2"]
    with pytest.raises(
        SystemExit, match=r"train: 1 missing, 0 unreadable.*query: 0 missing, 1 unr"
    ):
        main(argv)
    out = capsys.readouterr().out
    assert str(gone) in out and f"{cut}: OSError" in out
    with pytest.raises(SystemExit, match=r"train: 1 missing, 0 unreadable files$"):
        main([*argv, "--no-decode"])


def test_verify_fails_on_counts_that_differ_from_official(tmp_path: Path) -> None:
    root = _layouts.write_market(tmp_path)
    with pytest.raises(SystemExit, match=r"train: 6 images / 3 classes, official \(12936, 751\)"):
        main(["verify", "market1501", "--root", str(root)])


def test_verify_reports_layout_errors_and_wrong_options(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"MSMT17 not found in .*list_train.txt"):
        main(["verify", "msmt17", "--root", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"sop takes no --train-classes"):
        main(["verify", "sop", "--root", str(tmp_path), "--train-classes", "3"])


def test_download_without_direct_url_says_how_to_obtain(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"MSMT17 has no direct public download.*pkuvmc"):
        main(["download", "msmt17", "--root", str(tmp_path)])


def _refused_url() -> str:
    with socket.socket() as s:  # a port nobody listens on: the connection is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/CUB_200_2011.tgz"


def _with_url(monkeypatch: pytest.MonkeyPatch, url: str, md5: str) -> None:
    info = dataclasses.replace(CUB200DataModule.info, download_url=url, download_md5=md5)
    monkeypatch.setattr(CUB200DataModule, "info", info)


def test_download_offline_fails_fast_with_the_manual_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_url(monkeypatch, _refused_url(), "0" * 32)
    with pytest.raises(SystemExit, match=r"could not download .*offline.*CUB_200_2011.tgz"):
        main(["download", "cub200", "--root", str(tmp_path / "data"), "--timeout", "2"])
    assert list((tmp_path / "data").iterdir()) == []  # no partial file left behind


def _archive(tmp_path: Path) -> tuple[str, str]:
    """A CUB_200_2011.tgz of the tiny layout, as a file:// URL, and its md5."""
    source = _layouts.write_cub(tmp_path / "src")
    archive = tmp_path / "CUB_200_2011.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="CUB_200_2011")
    return archive.as_uri(), hashlib.md5(archive.read_bytes()).hexdigest()


def test_download_checks_md5_then_extracts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    url, md5 = _archive(tmp_path)
    root = tmp_path / "data"
    _with_url(monkeypatch, url, "f" * 32)
    with pytest.raises(SystemExit, match=rf"arrived with md5 {md5}, expected f{{32}}"):
        main(["download", "cub200", "--root", str(root)])
    assert not (root / "CUB_200_2011").exists()
    _with_url(monkeypatch, url, md5)
    main(["download", "cub200", "--root", str(root)])
    assert (root / "CUB_200_2011" / "images.txt").is_file()
    main(["verify", "cub200", "--root", str(root), "--train-classes", "2"])
    assert "cub200: OK" in capsys.readouterr().out
