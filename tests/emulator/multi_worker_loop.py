"""One training loop, run by the emulator in this process and by TensorFlow's
``MultiWorkerMirroredStrategy`` as one process per host (collectives over loopback).

A pod slice runs one TensorFlow process per host; ``MultiWorkerMirroredStrategy`` is
TensorFlow's strategy for exactly that on CPU: every worker calls ``dataset_fn`` with its
own ``InputContext`` and all-reduces across workers. ``run_cluster(hosts, route)`` starts
``hosts`` workers of this file (``python multi_worker_loop.py TASK PORTS ROUTE OUT``) and
returns what each replica saw and the weights they reached; ``train(strategy, route)``
is the loop itself, in float64 so a correct emulation agrees to rounding.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np

STEPS = 3
PER_REPLICA = 2
EXAMPLES = 64
ROUTES = ("dataset_fn", "global dataset")


def _example(i):
    import tensorflow as tf

    x = tf.cast(i, tf.float64)
    grid = tf.reshape(tf.range(8 * 8 * 2, dtype=tf.float64), [8, 8, 2])
    return i, tf.sin(0.1 * grid + x), tf.cos(x)


def _datasets(strategy, route, num_replicas):
    import tensorflow as tf

    if route == "dataset_fn":
        def dataset_fn(context):
            return (tf.data.Dataset.range(EXAMPLES)
                    .shard(context.num_input_pipelines, context.input_pipeline_id)
                    .map(_example).batch(context.get_per_replica_batch_size(
                        PER_REPLICA * num_replicas), drop_remainder=True))
        return strategy.distribute_datasets_from_function(dataset_fn)
    dataset = tf.data.Dataset.range(EXAMPLES).map(_example).batch(
        PER_REPLICA * num_replicas, drop_remainder=True)
    return strategy.experimental_distribute_dataset(dataset)


def train(strategy, route):
    """``STEPS`` SGD steps of a small conv net; per step the example ids each local
    replica saw and the global loss, and the weights reached."""
    import tensorflow as tf

    import spatial_tf

    replicas = strategy.num_replicas_in_sync
    global_batch = PER_REPLICA * replicas
    with strategy.scope():
        mean = tf.VariableAggregation.MEAN   # every replica applies the same update
        kernel = tf.Variable(np.linspace(-0.5, 0.5, 3 * 3 * 2 * 3).reshape(3, 3, 2, 3),
                             aggregation=mean)
        dense = tf.Variable(np.array([0.3, -0.2, 0.1]), aggregation=mean)

    def replica_step(batch):
        ids, image, target = batch
        image = spatial_tf.split(image, [1, 2, 1, 1])   # no-op off the emulator
        with tf.GradientTape() as tape:
            features = tf.nn.relu(tf.nn.conv2d(image, kernel, 1, "SAME"))
            prediction = tf.linalg.matvec(tf.reduce_mean(features, axis=[1, 2]), dense)
            loss = tf.reduce_sum((prediction - target) ** 2) / global_batch
        context = tf.distribute.get_replica_context()
        grads = context.all_reduce("sum", tape.gradient(loss, [kernel, dense]))
        kernel.assign_sub(0.1 * grads[0])
        dense.assign_sub(0.1 * grads[1])
        return ids, context.all_reduce("sum", loss)

    @tf.function
    def step(batch):
        return strategy.run(replica_step, args=(batch,))

    iterator = iter(_datasets(strategy, route, replicas))
    seen, losses = [], []
    for _ in range(STEPS):
        ids, loss = step(next(iterator))
        seen.append([t.numpy().tolist() for t in strategy.experimental_local_results(ids)])
        losses.append(float(strategy.experimental_local_results(loss)[0]))
    return {"seen": seen, "loss": losses,
            "kernel": kernel.numpy().ravel().tolist(), "dense": dense.numpy().tolist()}


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_cluster(hosts, route, timeout=240):
    """Run ``train`` on ``hosts`` MultiWorkerMirroredStrategy workers (one replica each);
    the results with ``seen`` merged over the workers in task order."""
    ports = ",".join(str(_free_port()) for _ in range(hosts))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    with tempfile.TemporaryDirectory() as out:
        workers = [subprocess.Popen(
            [sys.executable, __file__, str(task), ports, route, out], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for task in range(hosts)]
        logs = [w.communicate(timeout=timeout)[0] for w in workers]
        for task, (worker, log) in enumerate(zip(workers, logs)):
            if worker.returncode:
                raise RuntimeError(f"worker {task} exited {worker.returncode}:\n{log[-3000:]}")
        results = [json.load(open(os.path.join(out, f"{task}.json"))) for task in range(hosts)]
    merged = dict(results[0])
    merged["seen"] = [sum((r["seen"][s] for r in results), []) for s in range(STEPS)]
    merged["workers"] = results
    return merged


def _worker(task, ports, route, out):
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports.split(",")]},
        "task": {"type": "worker", "index": int(task)},
    })
    import tensorflow as tf

    result = train(tf.distribute.MultiWorkerMirroredStrategy(), route)
    with open(os.path.join(out, f"{task}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    _worker(*sys.argv[1:])
