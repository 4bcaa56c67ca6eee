"""A figure of a ``Plan``: per-core memory of each candidate against the budget, and the
bytes each moves per step (needs matplotlib: ``pip install "spatial-tf[plot]"``)."""
from spatial_tf.planning.budgets import GiB

__all__ = ["plot"]


def plot(plan, path: str) -> str:
    """Write ``plan``'s figure to ``path`` (PNG, SVG or PDF by extension); return it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(
            f"plot: matplotlib is not installed ({e}). Fix: pip install \"spatial-tf[plot]\"."
        ) from e
    ok = [c for c in plan.candidates if c.ok]
    labels = ["[" + ",".join(map(str, c.spec)) + "]" for c in ok]
    x = range(len(ok))
    fig, (mem, comm) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(ok) + 4), 4.2))
    width = 0.4
    with_cpu = [i for i, c in zip(x, ok) if c.cpu]  # a TPU compiler's plan has no CPU figures
    if with_cpu:
        mem.bar([i - width / 2 for i in with_cpu], [ok[i].cpu["peak"] / GiB for i in with_cpu],
                width, label="XLA:CPU peak")
    if plan.tpu_source:  # the compiler's figures; a refused program hatched at what it needs
        tpu_label = f"XLA:TPU peak ({plan.tpu_source.split(' (')[0]})"
    else:
        tpu_label = "TPU estimate" + (" (bf16 activations)" if plan.bf16 else "")
    bars = mem.bar([i + width / 2 for i in x], [c.tpu["peak"] / GiB for c in ok], width,
                   label=tpu_label)
    for bar, c in zip(bars, ok):
        if c.tpu_fits is False:
            bar.set_hatch("//")
            bar.set_alpha(0.5)
    if plan.budget is not None:
        mem.axhline(plan.budget.usable / GiB, color="red", linestyle="--",
                    label=f"budget {plan.budget.name}")
    mem.set_yscale("log")  # a small volume's bytes and a 16 GiB budget on one axis
    mem.set_ylabel("GiB per core (log scale)")
    mem.set_title("per-core memory" + (" (predicted from fit)" if plan.fit_sizes else ""))
    third = 0.27  # three bars per candidate, side by side within its slot
    comm.bar([i - third for i in x], [c.halo_bytes / 2**20 for c in ok], third,
             label="halo (collective-permute)")
    comm.bar(list(x), [c.resharding_bytes / 2**20 for c in ok], third,
             label="resharding (all-gather, all-to-all)")
    comm.bar([i + third for i in x], [c.all_reduce_bytes / 2**20 for c in ok], third,
             label="all-reduce")
    comm.set_ylabel("MiB per core per step")
    comm.set_title("communication")
    for ax in (mem, comm):
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=30, ha="right")
        ax.legend(fontsize=8)
    fig.suptitle(f"{plan.function}: {'x'.join(map(str, plan.shape))} on "
                 f"{plan.num_cores} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
