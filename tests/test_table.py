from spatial_tf.table import format_bytes, format_table, plural


def test_alignment_and_rule():
    text = format_table(["name", "n", "note"], [["a", 1, "x"], ["bbb", 100, None]], right=("note",))
    assert text.splitlines() == ["name    n  note", "----  ---  ----", "a       1     x", "bbb   100"]


def test_title_and_empty_rows():
    assert format_table(["a"], [], title="T").splitlines() == ["T", "a", "-"]


def test_format_bytes():
    assert [format_bytes(n) for n in (None, 12, 2048, 3 * 2**20, 5 * 2**30, 2**42)] == [
        "?", "12 B", "2.0 KiB", "3.0 MiB", "5.0 GiB", "4096.0 GiB"
    ]


def test_plural_says_one_without_an_s_and_everything_else_with_one():
    assert [plural(n, "core") for n in (0, 1, 2, 128)] == ["0 cores", "1 core", "2 cores",
                                                          "128 cores"]
    assert plural(1, "compile result") == "1 compile result"
    assert plural(3, "replica fed", "replicas fed") == "3 replicas fed"
