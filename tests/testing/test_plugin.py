"""The pytest plugin, run on small test files with ``pytester``, as a user's suite runs it."""
import importlib.metadata
import textwrap

import pytest

pytest_plugins = ["pytester"]

# Installed packages load the plugin through their entry point; a source checkout run
# from the repository root loads it by module name.
_INSTALLED = any(e.value == "spatial_tf.testing.plugin"
                 for e in importlib.metadata.entry_points(group="pytest11"))
PLUGIN = () if _INSTALLED else ("-p", "spatial_tf.testing.plugin")


def run(pytester, source, *args):
    pytester.makepyfile(test_user=textwrap.dedent(source))
    return pytester.runpytest_inprocess(*PLUGIN, "-p", "no:cacheprovider", *args)


def test_marker_lists_run_the_test_once_per_layout(pytester):
    result = run(pytester, """
        import pytest

        @pytest.mark.spatial_tf(cores=[1, 4], replicas=[1, 2])
        def test_layout(emulator, request):
            cores, replicas = request.node.callspec.id.split("x")
            assert (emulator.num_cores_per_replica, emulator.num_replicas) == (
                int(cores), int(replicas))
            assert len(emulator.devices) == int(cores) * int(replicas)

        def test_default(emulator):
            assert (emulator.num_cores_per_replica, emulator.num_replicas) == (2, 1)

        @pytest.mark.spatial_tf(cores=4)
        def test_shared(emulator, request):
            from spatial_tf.testing.plugin import _made
            assert _made[(4, 1)] is emulator   # one emulator per layout per session
    """, "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines([
        "*test_layout?1x1? PASSED*", "*test_layout?1x2? PASSED*",
        "*test_layout?4x1? PASSED*", "*test_layout?4x2? PASSED*",
        "*test_default PASSED*", "*test_shared?4x1? PASSED*",
    ])


@pytest.mark.parametrize(
    "marker, message",
    [
        ("cores=3", "cores=3; expected a power of two from 1 to 128. Fix: e.g. cores=4."),
        ("cores=[]", "cores=[]; expected a positive int or a non-empty list of them."),
        ("replicas=0", "replicas=0; expected a positive int or a non-empty list of them."),
        ("4", "got positional arguments (4,); expected keywords."),
        ("core=4", "1 unknown argument ['core']; expected cores= and replicas=."),
    ],
)
def test_bad_markers_fail_collection_with_the_fix(pytester, marker, message):
    result = run(pytester, f"""
        import pytest

        @pytest.mark.spatial_tf({marker})
        def test_x(emulator):
            pass
    """)
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert f"test_user.py::test_x: @pytest.mark.spatial_tf: {message}" in out
    assert "Traceback" not in out and "plugin.py" not in out


def test_assert_partitioned_matches_passes_and_fails_with_the_table(pytester):
    result = run(pytester, """
        import pytest, tensorflow as tf, spatial_tf
        from spatial_tf.testing import assert_partitioned_matches

        @pytest.mark.spatial_tf(cores=[2, 4])
        def test_conv(emulator):
            w = tf.Variable(tf.ones([3, 3, 1, 2]))
            def step(x):
                x = spatial_tf.split(x, [1, emulator.num_cores_per_replica, 1, 1])
                return tf.nn.conv2d(x, w, 1, "SAME")
            comparison = assert_partitioned_matches(emulator, step, (tf.ones([1, 8, 8, 1]),))
            assert comparison.ok and len(comparison.rows) == 1

        @pytest.mark.spatial_tf(cores=2)
        def test_random(emulator):
            def step(x):   # random numbers differ between layouts
                x = spatial_tf.split(x, [1, 2])
                return x + tf.random.uniform([4, 8])
            assert_partitioned_matches(emulator, step, (tf.ones([4, 8]),))
    """)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*ParityError: ERROR: 1 of 1 results differ beyond rounding*",
        "*step: partitioned vs unpartitioned XLA*",
        "*result*dtype*shape*max rel err*",
        "*outputs*float32*(4, 8)*ERROR*",
    ])
    assert "parity.py" not in result.stdout.str()  # the test's line, not the library's


def test_assert_no_activation_gather(pytester):
    result = run(pytester, """
        import pytest, tensorflow as tf, spatial_tf
        from spatial_tf.testing import assert_no_activation_gather

        def make_step(image_spec, mask_spec):
            def step(image, mask):
                image = spatial_tf.split(image, image_spec)
                mask = spatial_tf.split(mask, mask_spec)
                return tf.reduce_sum(tf.nn.relu(image) * mask)
            return step

        @pytest.mark.spatial_tf(cores=4)
        def test_same_split(emulator):
            args = (tf.ones([2, 16, 16, 1]), tf.ones([2, 16, 16, 1]))
            report = assert_no_activation_gather(
                emulator, make_step([1, 2, 2, 1], [1, 2, 2, 1]), args)
            assert report.warnings == []

        @pytest.mark.spatial_tf(cores=4)
        def test_mixed_splits(emulator):
            args = (tf.ones([2, 16, 16, 1]), tf.ones([2, 16, 16, 1]))
            assert_no_activation_gather(emulator, make_step([1, 4, 1, 1], [1, 2, 2, 1]), args)
    """)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*AssertionError: step: * activation-sized gather* on Emulator("
        "num_cores_per_replica=4, num_replicas=1); the split does not survive these ops:*",
        "*warnings:*",
        "*all-to-all of an activation-sized tensor at TensorFlow op*",
    ])


def test_helpers_refuse_something_that_is_not_an_emulator():
    from spatial_tf.testing import assert_no_activation_gather, assert_partitioned_matches

    for helper in (assert_partitioned_matches, assert_no_activation_gather):
        with pytest.raises(TypeError, match=rf"^{helper.__name__}: emulator is str; expected a "
                                             r"spatial_tf.Emulator\. Fix: use the 'emulator' "):
            helper("tpu", lambda x: x, (1.0,))


@pytest.mark.slow
def test_devices_are_configured_before_jax_starts(pytester, monkeypatch):
    # 2 x 128 = 256 devices: more than the emulator's default of 128, so only a
    # configuration made after collection and before jax starts can give them.
    pytester.makepyfile(test_user="""
        import pytest

        @pytest.mark.spatial_tf(cores=128, replicas=2)
        def test_big(emulator):
            assert len(emulator.devices) == 256
            import jax
            assert len(jax.devices("cpu")) == 256
    """)
    import pathlib

    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).parents[2]))  # this checkout
    monkeypatch.delenv("SPATIAL_TF_CPU_DEVICES", raising=False)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_entry_point_is_declared_in_setup_cfg():
    import configparser
    import importlib
    import pathlib

    cfg = configparser.ConfigParser()
    cfg.read(pathlib.Path(__file__).parents[2] / "setup.cfg")
    entry = cfg["options.entry_points"]["pytest11"].strip()
    assert entry == "spatial_tf = spatial_tf.testing.plugin"
    plugin = importlib.import_module(entry.split("= ")[1])
    assert callable(plugin.pytest_configure) and callable(plugin.emulator)


def test_the_documented_example_test_file_passes(pytester):
    import pathlib

    from markdown_it import MarkdownIt  # pytest-markdown-docs' parser

    readme = (pathlib.Path(__file__).parents[2] / "docs" / "guide-testing.md").read_text()
    blocks = [t.content for t in MarkdownIt("commonmark").parse(readme)
              if t.type == "fence" and t.info.startswith("python")
              and "def test_partitioned_step_matches_unpartitioned" in t.content]
    assert len(blocks) == 1
    pytester.makepyfile(test_partitioning=blocks[0])
    result = pytester.runpytest_inprocess(*PLUGIN, "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "*test_partitioned_step_matches_unpartitioned?2x1? PASSED*",
        "*test_partitioned_step_matches_unpartitioned?4x1? PASSED*",
        "*test_no_activation_is_reassembled?4x2? PASSED*",
    ])
