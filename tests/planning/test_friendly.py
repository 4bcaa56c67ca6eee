"""The planner on a user's own Keras model: as fit trains it, and before/after
partition_friendly."""
import keras
import pytest

import spatial_tf
from spatial_tf.planning import PlanOptions, plan_partition_friendly

pytestmark = pytest.mark.emulator

SPECS = [(1, 4, 1, 1, 1), (1, 2, 2, 1, 1)]


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 16, 1))
    a = keras.layers.Conv3D(4, 3, padding="same", name="a")(inputs)
    b = keras.layers.Conv3D(4, 3, padding="same", name="b")(a)
    x = keras.layers.Conv3D(4, 3, padding="same", name="c")(keras.layers.Concatenate()([a, b]))
    return keras.Model(inputs, keras.layers.Conv3D(3, 1, name="logits")(x), name="net")


def test_a_compiled_model_is_planned_with_its_compiled_loss_as_fit_trains_it():
    compiled = _model()
    compiled.compile(optimizer="sgd",
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    keras_loss = spatial_tf.plan(compiled, (1, 16, 16, 16, 1), 4, specs=SPECS,
                                 options=PlanOptions(progress=False))
    default = spatial_tf.plan(_model(), (1, 16, 16, 16, 1), 4, specs=SPECS,
                              options=PlanOptions(progress=False))
    ops = {c.spec: c.resharding_ops for c in keras_loss.candidates}
    # Keras' loss flattens [B, d, h, w, C] to [-1, C]: local for [1,4,1,1,1] only
    assert ops[(1, 4, 1, 1, 1)] == []
    assert ops[(1, 2, 2, 1, 1)] and all("compile_loss/sparse_categorical_crossentropy/" in op
                                        for op in ops[(1, 2, 2, 1, 1)])
    # spatial_tf's loss (the default for an uncompiled model) keeps every spec local
    assert all(c.resharding_ops == [] for c in default.candidates)
    assert keras_loss.function == "train_step"


def test_before_and_after_partition_friendly_with_the_same_specs_and_less_memory():
    model = _model()
    result = plan_partition_friendly(model, (1, 16, 16, 16, 1), 4, specs=SPECS,
                                     options=PlanOptions(memory="cpu", progress=False))
    assert [c.path for c in result.changes if c.after != "unchanged"] == [
        "net/a", "net/b", "net/c", "net/logits"]
    before = {c.spec: c for c in result.before.candidates}
    after = {c.spec: c for c in result.after.candidates}
    assert sorted(before) == sorted(after) == sorted(SPECS)
    for spec in SPECS:
        assert after[spec].peak("cpu") < before[spec].peak("cpu")
    table = str(result).splitlines()
    assert table[0] == ("train_step on 4 cores, per core (CPU peak), before and after "
                        "partition_friendly (4 layers changed)")
    assert sorted(row.split()[0] for row in table[3:]) == ["1,2,2,1,1", "1,4,1,1,1"]
    # the model stays partition-friendly: a second call finds nothing to change
    assert all(c.after == "unchanged" for c in spatial_tf.layers.partition_friendly(model))


def test_a_compiled_models_optimizer_keeps_the_gradients_whole():
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(name="fit_sgd"),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    result = plan_partition_friendly(model, (1, 16, 16, 16, 1), 4, specs=SPECS[:1],
                                     options=PlanOptions(memory="cpu", progress=False))
    assert [c.path for c in result.changes if c.after != "unchanged"] == [
        "optimizer/fit_sgd", "net/a", "net/b", "net/c", "net/logits"]


def test_without_the_halo_form_the_plan_after_keeps_tensorflows_kernel_gradient():
    result = plan_partition_friendly(_model(), (1, 16, 16, 16, 1), 4, halo=False,
                                     specs=SPECS[:1],
                                     options=PlanOptions(memory="cpu", progress=False))
    changes = {c.path: c for c in result.changes}
    for path in ("net/a", "net/b", "net/c"):
        assert changes[path].after == ("Conv3D with its kernel gradient made to wait for its "
                                       "input gradient")
        assert changes[path].why.startswith("halo=False")
    with_halo = plan_partition_friendly(_model(), (1, 16, 16, 16, 1), 4, specs=SPECS[:1],
                                        options=PlanOptions(memory="cpu", progress=False))
    assert {c.path: c.after for c in with_halo.changes}["net/a"] == (
        "Conv3D computing its kernel gradient from the output gradient's halo")
    # the two forms are different programs: XLA:CPU's peaks differ
    assert (result.after.candidates[0].peak("cpu")
            != with_halo.after.candidates[0].peak("cpu"))


def test_a_tpu_budget_makes_the_model_friendly_for_that_tpu():
    result = plan_partition_friendly(_model(), (1, 16, 16, 16, 1), 4, budget="v5e",
                                     specs=SPECS[:1],
                                     options=PlanOptions(memory="cpu", target=None,
                                                         progress=False))
    after = {c.path: c.after for c in result.changes}
    ordered = "Conv3D with its kernel gradient made to wait for its input gradient"
    # the TPU's forms: stride-1 convolutions keep TensorFlow's kernel gradient
    assert [after[p] for p in ("net/a", "net/b", "net/c", "net/logits")] == [ordered] * 4
    # with halo=True, or a budget that names no TPU, the halo form
    for options in ({"budget": "v5e", "halo": True}, {"budget": "16GiB"}):
        other = plan_partition_friendly(_model(), (1, 16, 16, 16, 1), 4, specs=SPECS[:1],
                                        options=PlanOptions(memory="cpu", target=None,
                                                            progress=False), **options)
        assert {c.path: c.after for c in other.changes}["net/a"] == (
            "Conv3D computing its kernel gradient from the output gradient's halo")
