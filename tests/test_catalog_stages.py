"""benchmarks/catalog_stages.py: the arithmetic of the pass shares by blame."""

from benchmarks import catalog_stages as cs


def _row(**stages):
    return {"stages": {s: {"status": st, "blame": b} for s, (st, b) in stages.items()}}


def test_the_figure_excludes_upstream_and_environment_and_counts_not_applicable_apart():
    rows = [
        _row(backward=("pass", None)),
        _row(backward=("skipped", None)),
        _row(backward=("not_attempted", "harness")),
        _row(backward=("not_attempted", "upstream")),
        _row(backward=("error", "environment")),
    ]
    fig = cs.attributable(rows)["backward"]
    assert fig["denominator"] == 3 and fig["passed"] == 1 and fig["not_applicable"] == 1
    assert fig["share"] == round(1 / 3, 4) and fig["share_applicable"] == round(2 / 3, 4)
    assert cs.blame_counts(rows)["backward"] == {"none": 1, "harness": 1, "upstream": 1, "environment": 1}
