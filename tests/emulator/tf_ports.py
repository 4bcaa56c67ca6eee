"""What the ports of TensorFlow's tests (``test_tf_*.py``) share: absl's flags marked
parsed, and the emulator as a ``combinations`` distribution.

TensorFlow's ``combinations`` read absl flags, which its test main parses; under pytest
the command line is pytest's, so they keep their defaults.

>>> one, two, two_by_two = emulator_distributions()
>>> [str(d) for d in (one, two, two_by_two)]
['Emulator1x1', 'Emulator1x2', 'Emulator2x2']
"""
import pytest
from absl import flags
from tensorflow.python.distribute import combinations

import spatial_tf

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


def emulator_distributions():
    """The emulator at one core per replica and one and two replicas, and at two cores
    per replica and two replicas, as ``combinations.NamedDistribution`` s; each made
    once, on first use, and kept by the module that asked (one set per calling file)."""
    made = {}

    def distribution(cores, replicas):
        def make():
            if (cores, replicas) not in made:
                made[cores, replicas] = spatial_tf.Emulator(cores, num_replicas=replicas)
            return made[cores, replicas]
        return combinations.NamedDistribution(f"Emulator{cores}x{replicas}", make)

    return distribution(1, 1), distribution(1, 2), distribution(2, 2)


def skip_or_xfail(request, skip_reason, xfailed, layout):
    """For a port's autouse fixture: skip the generated case ``request`` runs when
    ``skip_reason(name)`` gives a reason, or mark it a strict xfail when ``xfailed`` holds
    ``(base name, layout(name))``; ``TestCase.test_session``, which TensorFlow skips
    itself, is left alone."""
    name = request.function.__name__
    if "_test_" not in name:
        return
    reason = skip_reason(name)
    if reason is not None:
        pytest.skip(reason)
    bug = xfailed.get((name.split("_test_")[0], layout(name)))
    if bug is not None:
        request.node.add_marker(pytest.mark.xfail(reason=bug, strict=True))
