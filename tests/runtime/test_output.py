"""What the model reads of terminal output (pure functions of the runtime)."""

from __future__ import annotations

from pathlib import Path

from sandboxes.output import OutputBuffer, clean


def test_escape_sequence_split_across_chunks_is_still_stripped() -> None:
    buf = OutputBuffer(1000)
    pieces = [b"a\x1b[3", b"1mred\x1b]0;title", b"\x07 done\xe2\x82", b"\xac\n"]
    streamed = "".join(buf.feed(p) for p in pieces)
    text, cut = buf.result()
    assert text == streamed == "ared done\u20ac\n" and not cut


def test_head_and_tail_are_kept_with_exact_byte_count() -> None:
    buf = OutputBuffer(1000)
    for i in range(10000):
        buf.feed(b"%05d\n" % i)
    text, cut = buf.result()
    assert cut and text.startswith("00000\n00001\n") and text.endswith("09998\n09999\n")
    assert "60,000 bytes in all; the first 500 and the last 500 characters are shown" in text


def test_carriage_return_overwrites_keep_the_last_state() -> None:
    assert clean(b"10%\r50%\r100%\nnext\r\n") == "100%\nnext\n"


def test_a_long_line_is_cleaned_in_linear_time() -> None:
    # A regex-based version took 12 s on 100,000 characters; this must be instant.
    text, cut = OutputBuffer(2_000_000).feed(b"a" * 1_000_000), False
    assert OutputBuffer(2_000_000).result()[0] == "" and len(text) == 1_000_000 and not cut
    assert clean(b"a" * 1_000_000 + b"\rdone") == "done"


def test_python_search_fallback_agrees_with_ripgrep(tmp_path: Path) -> None:
    from sandboxes import files

    (tmp_path / "a.py").write_text("alpha = 1\nbeta = 2\nALPHA = 3\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("no match\nalphabet\n")
    (tmp_path / "bin.dat").write_bytes(b"alpha\0binary")
    for args in [("alpha", None, False, False), ("alpha", None, False, True), ("al.ha", "*.py", False, False),
                 ("a = ", None, True, False)]:  # fmt: skip
        rg = sorted(
            (m["path"], m["line"], m["text"]) for m in files._search_rg(args[0], str(tmp_path), *args[1:])
        )
        py = sorted(
            (m["path"], m["line"], m["text"]) for m in files._search_python(args[0], str(tmp_path), *args[1:])
        )
        assert rg == py and rg, args
