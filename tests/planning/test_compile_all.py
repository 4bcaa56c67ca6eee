"""Every candidate compiled in turn: rows as they come, a time limit, Ctrl-C."""
import time

import pytest

from spatial_tf.planning.compile_all import INTERRUPTED, NotCompiled, compile_all


def test_each_result_is_kept_and_an_error_stays_with_its_job():
    def run(job, left):
        if job == "b":
            raise ValueError("b does not compile")
        return job.upper()

    done = compile_all(["a", "b", "c"], run, progress=False)
    assert done["a"] == "A" and done["c"] == "C"
    assert isinstance(done["b"], ValueError) and str(done["b"]) == "b does not compile"


def test_ctrl_c_keeps_the_rows_known_and_marks_the_rest():
    def run(job, left):
        if job == 2:
            raise KeyboardInterrupt  # where Ctrl-C lands: the main thread, in a compile
        return job

    done = compile_all([1, 2, 3], run, progress=False)
    assert done[1] == 1
    assert [done[j].reason for j in (2, 3)] == [INTERRUPTED, INTERRUPTED]
    assert all(isinstance(done[j], NotCompiled) for j in (2, 3))


def test_ctrl_c_before_any_row_is_known_is_raised():
    def run(job, left):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compile_all([1, 2], run, progress=False)


def test_the_time_limit_is_handed_down_and_ends_the_plan():
    seen = []

    def run(job, left):
        seen.append(left)
        if left < 0.25:
            raise TimeoutError("the compiler ran past its limit")
        time.sleep(0.2)
        return job

    done = compile_all([1, 2, 3], run, timeout=0.3, progress=False)
    assert done[1] == 1 and 0.25 < seen[0] <= 0.3
    assert all(isinstance(done[j], NotCompiled) for j in (2, 3))
    assert str(done[3]) == "not compiled: the time limit of 0.3 s ended first"
    assert len(seen) == 2  # job 3 never started


def test_a_row_is_shown_as_each_job_ends(capsys):
    compile_all([1, 2], lambda job, left: job * 2, progress=True,
                row=lambda job, result: f"row {job}: {result}")
    err = capsys.readouterr().err
    assert err.index("row 1: 2") < err.index("row 2: 4")
