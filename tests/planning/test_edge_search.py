"""The largest-edge search's walk (``search.edge_search``) against every edge tried in
turn, on memory curves given here: exact answers, and few sizes that fit compiled.

``search_largest_edge`` runs it with the TPU compiler's verdicts (``test_search.py``);
here the verdicts come from formulas so that thousands of cases run in a second.
"""
import itertools
import random

import pytest

from spatial_tf.planning.search import edge_search


def _brute_force(fits, multiple, top):
    found = [e for e in range(multiple, top + 1, multiple) if fits(e)]
    return max(found) if found else None


def _walk(needs, available, multiple, top, rank, model_available=None):
    tried = []

    def at(edge):
        tried.append(edge)
        return needs(edge) <= available, needs(edge)

    answer = edge_search(at, multiple, top, model_available or available, rank)
    return answer, tried


CURVES = {
    "linear in voxels": lambda a, b, rank: (lambda e: a + b * e ** rank),
    "linear plus a surface term": lambda a, b, rank: (
        lambda e: a + b * e ** rank + 40 * b * e ** (rank - 1)),
    "steps (tile padding)": lambda a, b, rank: (lambda e: a + b * (-(-e // 8) * 8) ** rank),
}


@pytest.mark.parametrize("curve", sorted(CURVES))
def test_answers_are_what_trying_every_edge_gives(curve):
    rng = random.Random(7)
    cases = 0
    for rank, multiple in itertools.product((2, 3), (1, 8, 16)):
        for _ in range(60):
            a, b = rng.uniform(0, 1e9), rng.uniform(1, 1e3)
            needs = CURVES[curve](a, b, rank)
            top = multiple * rng.randint(1, 64)
            available = needs(rng.uniform(0.5, 1.2) * top)
            answer, tried = _walk(needs, available, multiple, top, rank)
            assert answer == _brute_force(lambda e: needs(e) <= available, multiple, top), (
                curve, rank, multiple, a, b, top, available, tried)
            assert len(tried) == len(set(tried)), "an edge was tried twice"
            assert all(e % multiple == 0 and multiple <= e <= top for e in tried)
            cases += 1
    assert cases == 360


def test_linear_memory_takes_at_most_two_fitting_compiles():
    rng = random.Random(11)
    worst = 0
    for _ in range(500):
        rank, multiple = rng.choice((2, 3)), rng.choice((1, 8, 16))
        a, b = rng.uniform(0, 1e9), rng.uniform(1, 1e3)
        needs = CURVES["linear in voxels"](a, b, rank)
        top = multiple * rng.randint(4, 64)
        available = needs(rng.uniform(0.3, 0.95) * top)
        answer, tried = _walk(needs, available, multiple, top, rank)
        worst = max(worst, sum(needs(e) <= available for e in tried))
        assert len(tried) <= 6, tried
    assert worst in (1, 2)


def test_the_top_fitting_ends_the_search_at_once():
    answer, tried = _walk(lambda e: e ** 3, 10 ** 9, 8, 256, 3)
    assert (answer, tried) == (256, [256])


def test_nothing_fits():
    answer, tried = _walk(lambda e: 10 ** 9 + e ** 3, 10 ** 6, 16, 256, 3)
    assert answer is None
    assert tried[0] == 256 and tried[-1] == 16


def test_without_a_memory_figure_it_bisects():
    needs = lambda e: e ** 2
    answer, tried = _walk(needs, 100 ** 2, 1, 1000, 2, model_available=None)
    assert answer == 100
    tried_blind = []

    def at(edge):
        tried_blind.append(edge)
        return needs(edge) <= 100 ** 2, needs(edge)

    assert edge_search(at, 1, 1000, None, 2) == 100
    assert len(tried_blind) <= 12  # log2(1000) + 2
    assert len(tried) < len(tried_blind)  # the memory figure saves compiles
