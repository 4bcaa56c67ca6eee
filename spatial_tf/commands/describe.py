"""``python -m spatial_tf describe``: plan a TPU slice's device assignment without a TPU.

    python -m spatial_tf describe --slice v3-32 --cores 8
    python -m spatial_tf describe --slice v4-32 --computation-shape 2,2,2,1 --replicas 1
    python -m spatial_tf describe --list-slices
"""
from spatial_tf.commands.options import (DEFAULT_CORES, add_command, add_cores_option,
                                         add_renamed, fail, int_list, positive_int,
                                         power_of_two)
from spatial_tf.table import plural

__all__ = ["add_parser", "run"]

PROG = "python -m spatial_tf describe"


def add_parser(subparsers):
    parser = add_command(
        subparsers, "describe",
        help="show the device assignment chosen for a named TPU slice (no TPU needed)",
        description="Choose a computation shape for a named TPU slice and show where every\n"
                    "logical core of every replica runs, which host feeds it, and batch-size\n"
                    "hints. Works from synthetic topologies; no TPU is needed.",
        epilog="examples:\n"
               "  python -m spatial_tf describe --slice v3-32 --cores 8\n"
               "  python -m spatial_tf describe --slice v4-32 --computation-shape 2,2,2,1",
    )
    parser.add_argument("--slice", metavar="NAME",
                        help="accelerator type, e.g. v3-32 or v5e-8")
    size = parser.add_mutually_exclusive_group()
    add_cores_option(size, default=None)  # None: argparse refuses --cores 8 with a shape
    add_renamed(size, "--cores-per-replica", "--cores", type=power_of_two, metavar="N")
    size.add_argument("--computation-shape", type=int_list(4), metavar="X,Y,Z,C",
                      help="block of cores per replica, e.g. 2,2,1,2")
    parser.add_argument("--replicas", type=positive_int(1), metavar="N",
                        help="replicas (default: all that fit the slice)")
    parser.add_argument("--computation-stride", type=int_list(4), metavar="X,Y,Z,C",
                        help="stride between replicas' blocks (default 1,1,1,1)")
    parser.add_argument("--global-batch", type=positive_int(1), metavar="N",
                        help="check a global batch size")
    parser.add_argument("--list-slices", action="store_true",
                        help="list the named slices and exit")
    parser.set_defaults(func=run)


def run(args):
    from spatial_tf import logs

    if not args.list_slices and not args.slice:
        return fail(  # a usage error, said before TensorFlow loads (seconds, 700 MB)
            PROG, "describe needs --slice NAME; expected a slice such as v3-8 or v5e-16 (see "
                  "--list-slices). Fix: e.g. --slice v3-8 --cores 8")
    logs.start_tensorflow()  # its start-up lines stay hidden (SPATIAL_TF_VERBOSE=1)
    from spatial_tf import topology as topo
    from spatial_tf.table import format_table

    if args.list_slices:
        print(format_table(*_slice_rows(topo)))
        return 0
    try:
        topology = topo.synthetic(args.slice)
        choice = topo.choose(
            topology,
            computation_shape=args.computation_shape,
            num_cores_per_replica=None if args.computation_shape else
            args.cores or DEFAULT_CORES,
            num_replicas=args.replicas,
            computation_stride=args.computation_stride,
        )
        da = choice.device_assignment()
        hints = topo.batch_hints(da, args.global_batch)
    except (TypeError, ValueError) as e:
        return fail(PROG, str(e))
    print(_header(topology, choice))
    print()
    print(topo.describe(da))
    print()
    print("Batch size:")
    for line in hints:
        print(f"  - {line}")
    return 0


def _header(topology, choice):
    s = topology.slice
    x, y, z = s.chips
    replicas = (
        f"{choice.num_replicas} (all that fit)"
        if choice.num_replicas == choice.max_replicas
        else f"{choice.num_replicas} of {choice.max_replicas} that fit"
    )
    return "\n".join([
        f"Slice {s.name}: {x}x{y}x{z} chips x {plural(s.cores_per_chip, 'core')} per chip = "
        f"{plural(s.num_cores, 'core')}, mesh_shape {list(s.mesh_shape)}; "
        f"{plural(s.num_hosts, 'host')} x {plural(s.num_cores // s.num_hosts, 'core')}",
        f"computation_shape: {list(choice.computation_shape)} "
        f"({plural(choice.num_cores_per_replica, 'core')} per replica)",
        f"  why: {choice.reason}",
        f"replicas: {replicas}",
    ])


def _slice_rows(topo):
    from spatial_tf.topology import valid_core_counts

    rows = []
    for name, s in topo.SLICES.items():
        counts = valid_core_counts(topo.synthetic(name))
        rows.append([
            name, s.generation, "x".join(map(str, s.chips)), s.cores_per_chip,
            s.num_cores, s.num_hosts, f"1 to {counts[-1]}",
        ])
    headers = ["slice", "generation", "chips", "cores/chip", "cores", "hosts",
               "cores per replica (powers of 2)"]
    return headers, rows
