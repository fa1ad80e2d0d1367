"""`circlebench data list|info|verify|download` on tiny layouts; no network but a refused port."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

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


def test_download_offline_names_a_bad_copy_already_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An incomplete archive copied by hand: "copy it there" alone would send the user in a
    circle; the message says the file there is not the right one."""
    _with_url(monkeypatch, _refused_url(), "0" * 32)
    (tmp_path / "CUB_200_2011.tgz").write_bytes(b"junk")
    bad = hashlib.md5(b"junk").hexdigest()
    with pytest.raises(SystemExit, match=rf"has md5 {bad}, not 0{{32}}: it is incomplete"):
        main(["download", "cub200", "--root", str(tmp_path), "--timeout", "2"])


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
    assert list(root.iterdir()) == []  # neither the archive nor a temporary file is left
    _with_url(monkeypatch, url, md5)
    main(["download", "cub200", "--root", str(root)])
    assert (root / "CUB_200_2011" / "images.txt").is_file()
    main(["verify", "cub200", "--root", str(root), "--train-classes", "2"])
    assert "cub200: OK" in capsys.readouterr().out


def _jpeg(path: Path, size: int = 64) -> bytes:
    """A clean baseline JPEG of a colour gradient, written to `path`; its bytes."""
    ramp = np.add.outer(np.arange(size), np.arange(size)).astype(np.uint8) * 2
    Image.fromarray(np.stack([ramp, ramp[::-1], ramp.T], axis=-1)).save(path, quality=90)
    return path.read_bytes()


def _garble_scan(path: Path) -> None:
    """Keep the headers (SOI … SOS) and the EOI; replace the entropy-coded data by noise.

    The noise holds no 0xFF byte, so no marker appears and the file's structure stays valid.
    """
    data = bytearray(_jpeg(path))
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")  # after the SOS header
    noise = np.random.default_rng(0).integers(0, 255, len(data) - 2 - start, dtype=np.uint8)
    data[start:-2] = noise.tobytes()
    path.write_bytes(bytes(data))


def test_garbled_jpeg_decodes_silently_in_pillow_but_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    simplejpeg = pytest.importorskip("simplejpeg", reason="verify's strict JPEG check needs it")
    root = _layouts.write_cub(tmp_path)
    victim = root / "images" / "003.Bird_3" / "Bird_3_0001_790006.jpg"
    _garble_scan(victim)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow neither raises nor warns: training reads noise
        with Image.open(victim) as image:
            image.load()
    with pytest.raises(ValueError, match="Corrupt JPEG data"):  # libjpeg only warns
        simplejpeg.decode_jpeg(victim.read_bytes(), strict=True)
    with pytest.raises(SystemExit, match=r"query: 0 missing, 1 unreadable"):
        main(["verify", "cub200", "--root", str(root), "--train-classes", "2"])
    assert f"{victim}: ValueError: Corrupt JPEG data" in capsys.readouterr().out


def test_verify_counts_a_decoder_warning_as_corruption(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = _layouts.write_cub(tmp_path)
    victim = root / "images" / "001.Bird_1" / "Bird_1_0002_790002.jpg"
    data = _jpeg(victim)
    mpf = b"MPF\x00" + bytes(4) + b"garbage!"  # an APP2 multi-picture header Pillow can't parse
    victim.write_bytes(data[:2] + b"\xff\xe2" + (len(mpf) + 2).to_bytes(2, "big") + mpf + data[2:])
    with pytest.warns(UserWarning, match="malformed MPO"):
        Image.open(victim).close()
    with pytest.raises(SystemExit, match=r"train: 0 missing, 1 unreadable"):
        main(["verify", "cub200", "--root", str(root), "--train-classes", "2"])
    assert f"{victim}: UserWarning: Image appears to be a malformed MPO" in capsys.readouterr().out


def test_verify_finds_truncation_even_where_pillow_is_told_to_load_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)  # as some libraries set it
    root = _layouts.write_cub(tmp_path)
    cut = root / "images" / "004.Bird_4" / "Bird_4_0002_790011.jpg"
    cut.write_bytes(_jpeg(cut)[:-200])
    with pytest.raises(SystemExit, match=r"query: 0 missing, 1 unreadable"):
        main(["verify", "cub200", "--root", str(root), "--train-classes", "2"])
    assert f"{cut}: OSError: image file is truncated" in capsys.readouterr().out
    assert ImageFile.LOAD_TRUNCATED_IMAGES  # restored for the rest of the process
