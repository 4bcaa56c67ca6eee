"""``tf.summary`` calls inside a step: cut out of the compiled program and written on
the host, as TPUStrategy runs them.
"""
