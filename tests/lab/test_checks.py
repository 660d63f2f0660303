"""The check helper pages print comparisons through: it prints only checks that hold, in lines a phone fits."""

import pytest
import torch

from lessons_src.lab.checks import WIDTH, CheckFailed, ClaimFailed, claim, close, equal, holds
from lessons_src.masks import causal_mask


def test_close_prints_the_difference_and_the_tolerance(capsys):
    assert close("output == SDPA", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6])) is None  # no Out[]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "output == SDPA: yes"
    assert out[1:] == ["  max |diff| 9.5e-07, rel 4.8e-07", "  allowed 1e-06 + 1e-05·|want|"]  # 2 + 9.5e-7 in f32


def test_close_tolerance_is_relative_to_each_entry():
    # The tensor-parallel lesson's case: a gradient of 12.8 differs by 3.8e-6 after a float32 reduction in another
    # order, within 1e-5 of 12.8. The same difference on an entry of 0.01 is 38 times its relative tolerance.
    want = torch.tensor([12.8, -3.0, 0.01], dtype=torch.float64)
    got = want + torch.tensor([3.8e-6, 0.0, 0.0], dtype=torch.float64)
    assert not torch.allclose(got, want, rtol=0, atol=1e-6)
    close("gradients == one process", [got], [want])
    with pytest.raises(CheckFailed, match=r"exceed the tolerance; the first, \[0\]\[2\], is 0.0100038"):
        close("gradients == one process", [want + torch.tensor([0.0, 0.0, 3.8e-6], dtype=torch.float64)], [want])


@pytest.mark.parametrize(
    ("got", "want", "message"),
    [
        (torch.ones(2, 3), torch.ones(3, 2), "shapes differ"),
        (torch.tensor([float("nan")]), torch.tensor([1.0]), "non-finite"),
        (torch.tensor([float("inf")]), torch.tensor([1.0]), "non-finite"),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), "exceed the tolerance"),
        ([torch.ones(2)], [torch.ones(2), torch.ones(2)], "counts must match"),
    ],
)
def test_close_raises_instead_of_printing_false(capsys, got, want, message):
    with pytest.raises(CheckFailed, match=message):
        close("compared", got, want)
    assert capsys.readouterr().out == ""


def test_close_accepts_matching_non_finite_values(capsys):
    masked = torch.tensor([float("-inf"), 0.5, float("nan")])
    close("masked scores", masked, masked.clone())
    assert capsys.readouterr().out.startswith("masked scores: yes")


def test_equal_is_bit_for_bit(capsys):
    equal("same tokens", torch.tensor([1, 2]), torch.tensor([1, 2]))
    equal("shape", (2, 3), (2, 3))
    assert capsys.readouterr().out.splitlines() == ["same tokens: yes", "  bit for bit", "shape: yes"]
    with pytest.raises(CheckFailed, match="1 of 2 elements differ"):
        equal("same tokens", torch.tensor([1, 2]), torch.tensor([1, 3]))
    with pytest.raises(CheckFailed, match=r"\(2, 3\) != \(3, 2\)"):
        equal("shape", (2, 3), (3, 2))


def test_holds_and_claim(capsys):
    holds("rows sum to 1", True, "largest gap 1e-7")
    assert capsys.readouterr().out.splitlines() == ["rows sum to 1: yes", "  largest gap 1e-7"]
    with pytest.raises(CheckFailed, match="does not hold"):
        holds("rows sum to 1", False)
    with pytest.raises(TypeError, match="one bool"):
        holds("rows sum to 1", torch.tensor([True, False]))  # type: ignore[arg-type]
    claim("page/true-claim", True, "1 < 2")
    assert capsys.readouterr().out == ""
    with pytest.raises(ClaimFailed, match=r"'page/false' no longer holds: 12 of 32"):
        claim("page/false", False, "12 of 32")


def test_every_printed_line_fits_a_phone(capsys):
    close("a long description of what is being compared here", torch.ones(2), torch.ones(2))
    holds("another long description of a condition that holds", True, "with a long detail " * 3)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 4
    assert max(len(line) for line in lines) <= WIDTH


def test_lines_go_to_the_callers_print(capsys):
    """markdown-exec puts its own ``print`` (into the page) in an executed block's globals: the checks use it."""
    page: list[str] = []
    block = {"print": page.append, "torch": torch, "close": close, "equal": equal, "holds": holds}
    exec('close("a == b", torch.ones(2), torch.ones(2))\nequal("n", 3, 3)\nholds("h", True, "d")', block)
    assert page[0] == "a == b: yes" and page[1].startswith("  max |diff| ")
    assert page[3:] == ["n: yes", "h: yes", "  d"]
    assert capsys.readouterr().out == ""  # nothing went to the build log instead


INF, NAN = float("inf"), float("nan")


def test_close_refuses_a_forgotten_mask(capsys):
    """The review's case: unmasked scores against the masked reference printed "yes, max |diff| 0"."""
    torch.manual_seed(0)
    s = torch.randn(4, 4)
    with pytest.raises(CheckFailed, match="finite"):
        close("masked", s, s.masked_fill(~causal_mask(4), -INF))
    with pytest.raises(CheckFailed, match="finite"):  # and the other way round
        close("masked", s.masked_fill(~causal_mask(4), -INF), s)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("got", "want"),
    [
        ([1.0, INF], [1.0, -INF]),  # the sign of an infinity
        ([1.0, NAN], [1.0, INF]),  # NaN for an infinity
        ([1.0, INF], [1.0, NAN]),
        ([1.0, 2.0], [1.0, NAN]),  # a number where the reference has NaN
    ],
)
def test_close_needs_the_same_non_finite_pattern(got, want):
    with pytest.raises(CheckFailed, match="not finite in one"):
        close("compared", torch.tensor(got), torch.tensor(want))


def test_one_large_value_does_not_hide_a_wrong_small_one():
    with pytest.raises(CheckFailed, match=r"\[1\]"):  # names where
        close("x", torch.tensor([1e5, 0.5]), torch.tensor([1e5, 0.1]))
    with pytest.raises(CheckFailed, match=r"\[1\]"):
        close("x", [1e5, 0.5], [1e5, 0.1])
    grads = [torch.tensor([1e6, 3.0]), torch.tensor([1.0, 2.0])]
    wrong = [torch.tensor([1e6, 3.0]), torch.tensor([1.0, 4.0])]  # off by 2 beside a gradient of 1e6
    with pytest.raises(CheckFailed, match=r"\[1\]\[1\]"):
        close("grads", wrong, grads)


def test_close_reports_the_relative_difference_where_rtol_bounds_it(capsys):
    """An entry near zero may differ by much of itself and still pass on atol: "rel" is taken where rtol sets the
    bound, so a page never prints a large "rel" beside "yes" (a reader took "rel 4.5e-02 ... yes" for a
    contradiction)."""
    close("x", torch.tensor([1.0, 1.2e-7], dtype=torch.float64), torch.tensor([1.0, 1e-7], dtype=torch.float64))
    out = capsys.readouterr().out
    assert "rel 0.0e+00" in out and "rel 2.0e-01" not in out, out
    close("x", torch.tensor([1.0 + 5e-6, 1.2e-7], dtype=torch.float64), torch.tensor([1.0, 1e-7], dtype=torch.float64))
    assert "rel 5.0e-06" in capsys.readouterr().out  # the entry rtol bounds


def test_close_prints_the_largest_relative_error(capsys):
    close("x", torch.tensor([1.0, 2.0 + 4e-6]), torch.tensor([1.0, 2.0]), rtol=1e-5, atol=0)
    out = capsys.readouterr().out
    assert "rel 2.0e-06" in out, out  # 2 + 4e-6 in float32 is 2 + 4.05e-6: 2.0e-6 of 2


@pytest.mark.parametrize(
    ("got", "want"),
    [
        (torch.full((3,), NAN), torch.full((3,), NAN)),
        (torch.full((2,), -INF), torch.full((2,), -INF)),
        (torch.empty(0), torch.empty(0)),
        ([], []),
        ({}, {}),
        ([torch.ones(2), torch.empty(0, 3)], [torch.ones(2), torch.empty(0, 3)]),
    ],
)
def test_nothing_compared_fails(capsys, got, want):
    with pytest.raises(CheckFailed, match="nothing"):
        close("nothing", got, want)
    assert capsys.readouterr().out == ""


def test_equal_of_nothing_fails():
    with pytest.raises(CheckFailed, match="nothing"):
        equal("nothing", torch.empty(0), torch.empty(0))


def test_close_compares_state_dicts(capsys):
    torch.manual_seed(0)
    a = torch.nn.Linear(3, 2).state_dict()
    b = {k: v.clone() for k, v in a.items()}
    close("weights", a, b)
    assert capsys.readouterr().out.startswith("weights: yes")
    b["bias"] = b["bias"] + 1
    with pytest.raises(CheckFailed, match=r"\['bias'\]"):
        close("weights", a, b)
    with pytest.raises(CheckFailed, match="keys"):
        close("weights", a, {"weight": a["weight"]})


@pytest.mark.parametrize(("got", "want"), [("abc", "abc"), (b"ab", b"ab"), (object(), object()), ({1}, {1})])
def test_close_names_what_it_cannot_compare(got, want):
    with pytest.raises(TypeError, match=type(got).__name__):
        close("strings", got, want)


def test_equal_compares_sequences_of_tensors(capsys):
    equal("tokens", [torch.tensor([1, 2]), torch.tensor([3])], [torch.tensor([1, 2]), torch.tensor([3])])
    assert capsys.readouterr().out.startswith("tokens: yes")
    with pytest.raises(CheckFailed, match=r"\[1\]"):
        equal("tokens", [torch.tensor([1, 2]), torch.tensor([3])], [torch.tensor([1, 2]), torch.tensor([4])])
