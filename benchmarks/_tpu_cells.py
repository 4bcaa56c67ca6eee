"""Table cells the benchmarks share for a report compiled for a TPU target."""


def split_and_one_core(split, one):
    """Two predicted step times in seconds as one cell, ``-`` for a missing one.

    >>> split_and_one_core(0.026, 0.104), split_and_one_core(None, 0.104)
    ('26.0 ms / 0.104 s', '- / 0.104 s')
    """
    from spatial_tf.emulator.tpu import seconds_text

    return " / ".join("-" if s is None else seconds_text(s) for s in (split, one))


def step_time_cell(tpu):
    """The TPU cost model's predicted step time, split and on one core, from
    ``Report.tpu``; or why there is none.

    >>> step_time_cell({"step_time": {}, "step_time_missing": "partitioned: does not fit"})
    'none (partitioned: does not fit)'
    """
    times = tpu.get("step_time") or {}
    split, one = times.get("partitioned"), times.get("unpartitioned")
    if split is None or one is None:
        return f"none ({tpu.get('step_time_missing')})"
    return split_and_one_core(split.seconds, one.seconds)
