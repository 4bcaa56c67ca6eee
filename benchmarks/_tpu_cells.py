"""Table cells the benchmarks share for a report compiled for a TPU target."""


def step_time_cell(tpu):
    """The TPU cost model's predicted step time, split and on one core, from
    ``Report.tpu``; or why there is none.

    >>> step_time_cell({"step_time": {}, "step_time_missing": "partitioned: does not fit"})
    'none (partitioned: does not fit)'
    """
    from spatial_tf.emulator.tpu import seconds_text

    times = tpu.get("step_time") or {}
    split, one = times.get("partitioned"), times.get("unpartitioned")
    if split is None or one is None:
        return f"none ({tpu.get('step_time_missing')})"
    return f"{seconds_text(split.seconds)} / {seconds_text(one.seconds)}"
