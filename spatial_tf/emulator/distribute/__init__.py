"""The ``tf.distribute`` strategy: ``Emulator``, its extended and replica contexts,
input distribution over replicas and hosts, and per-replica variables.
"""
