"""Fixtures for the emulator tests: shared emulators (compiled steps are cached per emulator)."""
import pytest

from spatial_tf.emulator import Emulator


@pytest.fixture(scope="session")
def emulators():
    """``emulators(cores, replicas=1)`` -> one shared Emulator per layout."""
    made = {}

    def get(cores, replicas=1):
        key = (cores, replicas)
        if key not in made:
            made[key] = Emulator(num_cores_per_replica=cores, num_replicas=replicas)
        return made[key]

    return get
