"""Benchmark: an assign outside a step writes every replica's copy, on real Keras models.

Each model is fit one step in float64 on ``Emulator(1, num_replicas=2)``: each replica's
batch-norm moving statistics then come from its own half of the batch (as under
MirroredStrategy and TPUStrategy). ``model.set_weights(model.get_weights())`` in the
scope then writes every replica's copy, as TensorFlow's cross-replica assign does, so
the replicas' predictions equal a plain TensorFlow model's with the weights read back.
Printed per model: the largest prediction difference from plain TensorFlow before and
after the assign, and the seconds taken. The test suite checks a small Conv+BN model
against MirroredStrategy (tests/emulator/distribute/test_cross_replica_assign.py); this
runs Keras' own ResNet50 (random weights), too slow for the suite.

    python benchmarks/cross_replica_assign.py                  # both models
    python benchmarks/cross_replica_assign.py --models conv_bn
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

MODELS = ("conv_bn", "resnet50")


def build(name):
    """``(model, image shape, classes)`` with float64 weights and seed 0."""
    import keras

    keras.utils.set_random_seed(0)
    if name == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    inputs = keras.Input((8, 8, 2))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def measure(name):
    import keras
    import numpy as np

    import spatial_tf

    start = time.perf_counter()
    rng = np.random.default_rng(0)
    shape = (64, 64, 3) if name == "resnet50" else (8, 8, 2)
    x, y = rng.normal(size=(8, *shape)), rng.integers(0, 10, size=(8,))
    x_test = rng.normal(size=(4, *shape))
    emulator = spatial_tf.Emulator(1, num_replicas=2)
    with emulator.scope():
        model = build(name)
        model.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    plain = build(name)
    plain.set_weights(model.get_weights())
    want = plain.predict(x_test, verbose=0)

    def off():
        return float(np.abs(model.predict(x_test, batch_size=4, verbose=0) - want).max())

    before = off()
    with emulator.scope():
        model.set_weights(model.get_weights())
    return before, off(), time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    args = parser.parse_args(argv)
    import keras

    from spatial_tf.table import format_table

    keras.config.set_floatx("float64")
    rows = []
    for name in args.models:
        before, after, seconds = measure(name)
        rows.append([name, f"{before:.2g}", f"{after:.2g}", f"{seconds:.0f}"])
        print(f"{name}: done in {seconds:.0f} s", file=sys.stderr, flush=True)
    print("Emulator(1, num_replicas=2), float64: largest prediction difference from plain "
          "TensorFlow")
    print(format_table(["model", "after fit", "after set_weights(get_weights())", "s"], rows))


if __name__ == "__main__":
    main()
