"""The check helper pages print comparisons through: it prints only checks that hold, in lines a phone fits."""

import pytest
import torch

from lessons_src.lab.checks import WIDTH, CheckFailed, ClaimFailed, claim, close, equal, holds


def test_close_prints_the_difference_and_the_tolerance(capsys):
    assert close("output == SDPA", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6])) is None  # no Out[]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "output == SDPA: yes"
    assert out[1].startswith("  max |diff| 9.5e-07 ≤"), out[1]  # 2 + 1e-6 in float32 is 2 + 9.5e-7


def test_close_tolerance_scales_with_the_values_size(capsys):
    # The tensor-parallel lesson's case: gradients as large as 12.8 differ by 3.8e-6 after a float32 reduction
    # in another order. A fixed atol of 1e-6 calls that a mismatch; a tolerance relative to 12.8 does not.
    want = torch.tensor([12.8, -3.0, 0.5], dtype=torch.float64)
    got = want + torch.tensor([3.8e-6, 0.0, 0.0], dtype=torch.float64)
    assert not torch.allclose(got, want, rtol=0, atol=1e-6)
    close("gradients == one process", [got], [want])
    with pytest.raises(CheckFailed, match=r"exceeds the tolerance"):
        close("gradients == one process", [got * 1.001], [want])


@pytest.mark.parametrize(
    ("got", "want", "message"),
    [
        (torch.ones(2, 3), torch.ones(3, 2), "shapes differ"),
        (torch.tensor([float("nan")]), torch.tensor([1.0]), "non-finite"),
        (torch.tensor([float("inf")]), torch.tensor([1.0]), "non-finite"),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), "exceeds the tolerance"),
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
    assert page[2:] == ["n: yes", "h: yes", "  d"]
    assert capsys.readouterr().out == ""  # nothing went to the build log instead
