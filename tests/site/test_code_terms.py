"""No name in shown code and no abbreviation before it is explained: the term test, extended past the glossary.

:mod:`test_terms` checks the glossary's words in the prose. This checks, on every lesson in the navigation's
order, the names and abbreviations that **two or more lessons use** (the course's recurring vocabulary; a
name one lesson uses once is read there, beside its import):

* **code names**: in a code block whose source the page shows, every name it imports from ``lessons_src``,
  every attribute it reads that the package defines, written with an underscore or a capital (``qkv_proj``,
  ``head_dim``, ``LatentCache``: a plain word such as ``tokens`` or ``it`` reads as English, so it is left
  out), every name of the package's top-level API it uses without importing (a hidden block of its session
  imported it), and what it takes from ``torch.nn`` and ``torch.nn.functional`` or imports from torch's
  submodules (``nn.Linear``, ``F.linear``). Plain ``torch.*`` and tensor methods are the start page's
  prerequisite ("PyTorch at the level of tensors"), so they are left out; so are names the block itself
  assigns or defines, ALL-CAPS constants, Python's keywords and builtins;
* **abbreviations**: words of two or more capitals (SDPA, KV), in the prose and in shown code's comments and
  strings. A glossary term (MLP, GQA, "KV cache") is :mod:`test_terms`'s, so it is left out here.

**Explained** means, for a use in a shown block, said in the prose of an earlier lesson, of the same page
before the block or right after it (up to the next shown block), or of the glossary when the page links it;
for a use in prose, the same, with the same sentence in place of "right after it". Said means:

* a code name: written in inline code (`` `qkv_proj` ``, `` `nn.Linear` ``), or in plain text when no English
  word looks like it (an underscore, an inner capital or a dot: fit_single_head, LatentCache); a block that
  prints a name's source (``inspect.getsource(name)``) says it too;
* an abbreviation: spelled out, next to the words whose initials make it ("scaled dot-product attention
  (SDPA)", "SDPA (scaled dot-product attention)", "the feed-forward network, FFN"); or in parentheses
  right after what it names ("main memory (HBM)"); or defined as :mod:`test_terms` defines a term (in bold,
  or followed by a gloss of three or more words in parentheses).

The prose is read from the Markdown (front matter, code, math, HTML tags and each page's References section
left out), so the test needs no build (it shares tests/helpers/glossary.py with :mod:`test_terms`).
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import re
import tokenize
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from glossary import Sentence, defines, glossary_terms, term_pattern
from reading_order import DOCS, LESSONS, ROOT

if TYPE_CHECKING:
    from pathlib import Path

# Abbreviations this test does not police, each with the reason. Reviewed: keep it tiny.
EXEMPT = {
    "CPU": "the start page's prerequisite is PyTorch, whose tensors live on a CPU or a GPU",
    "GPU": "the start page's prerequisite is PyTorch, whose tensors live on a CPU or a GPU",
}

_FENCE = re.compile(r"^( *)```(\w*)([^\n]*)\n(.*?)^\1```[ \t]*$", re.S | re.M)
_ABBREVIATION = re.compile(r"(?<![\w-])[A-Z][A-Z0-9]*[A-Z](?!\w)")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_TORCH_MODULES = {"nn", "F"}  # `from torch import nn`, `import torch.nn.functional as F`
_PYTHON = set(dir(builtins)) | set(keyword.kwlist)


@dataclass
class Block:
    """A code block whose source the page shows, with the names and abbreviations it uses."""

    code: str
    names: set[str] = field(default_factory=set)
    abbreviations: set[str] = field(default_factory=set)


@dataclass
class Page:
    """A lesson as the reader meets it: prose paragraphs and shown code, in order."""

    src: str
    parts: list[str | Block]  # a str is prose (Markdown, code spans kept), a Block is shown code
    links_glossary: bool


def package_names(root: Path = ROOT / "lessons_src") -> tuple[set[str], set[str]]:
    """(every public name the package defines: functions, classes, attributes, fields; its top-level API)."""
    defined: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined.add(node.target.id)
    init = ast.parse((root / "__init__.py").read_text(encoding="utf-8"))
    api = {
        elt.value
        for node in init.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        for elt in node.value.elts  # type: ignore[attr-defined]
    }
    return {n for n in defined if not n.startswith("_")}, api


PACKAGE, API = package_names()


def _looks_like_code(name: str) -> bool:
    return "_" in name or name != name.lower()


def _dotted(node: ast.expr) -> list[str]:
    """`torch.nn.functional.softmax` as its parts; [] when the chain does not start at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


def _torch_name(chain: list[str]) -> str | None:
    """`nn.Linear` or `F.softplus` for a use of torch.nn or torch.nn.functional; None for the rest of torch."""
    chain = ["torch", "nn", *chain[1:]] if chain[0] == "nn" else chain
    chain = ["torch", "nn", "functional", *chain[1:]] if chain[0] == "F" else chain
    if chain[:3] == ["torch", "nn", "functional"] and len(chain) == 4:
        return f"F.{chain[3]}"
    if chain[:2] == ["torch", "nn"] and len(chain) == 3 and chain[2] != "functional":
        return f"nn.{chain[2]}"
    return None


def code_names(code: str, package: set[str] = PACKAGE, api: set[str] = API) -> set[str]:
    """The names a shown block uses that the rule checks (the module docstring says which)."""
    tree = ast.parse(code)
    local: set[str] = set()  # what the block itself names: its variables, functions, arguments, attributes set
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            local.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            local.add(node.attr)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in {"lessons_src", "torch"}:
            if node.module != "torch":  # `from torch import nn` names a module, whose uses are checked
                names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = _dotted(node)
            if chain and chain[0] in {"torch", *_TORCH_MODULES}:
                names |= {n for n in [_torch_name(chain)] if n}
            elif node.attr in package and _looks_like_code(node.attr) and node.attr not in local:
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in api - local:
            names.add(node.id)
    return {n for n in names if n not in _PYTHON and not n.isupper()}


def code_abbreviations(code: str) -> set[str]:
    """Abbreviations in a block's comments and strings (f-strings' fields and the block's own names left out)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    own = {t.string for t in tokens if t.type == tokenize.NAME}
    found: set[str] = set()
    for token in tokens:
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            text = re.sub(r"\{[^{}]*\}", " ", token.string)
            found |= {a for a in _ABBREVIATION.findall(text) if a not in own}
    return found


def _strip_prose(text: str) -> str:
    """Markdown prose without math, HTML tags, attribute lists, images, link targets or admonition markers."""
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"(?<![\\$])\$[^$\n]+\$", " ", text)
    text = re.sub(r"<[^>\n]+>", " ", text)
    text = re.sub(r"\{[:#.][^}\n]*\}", " ", text)
    text = re.sub(r'^\s*[?!]{3}\+?\s*\w+(?:\s+"([^"]*)")?', r"\1", text, flags=re.M)
    return text


def read_page(src: str, docs: Path = DOCS) -> Page:
    """The lesson's prose and shown code, in order (its References section and its hidden blocks left out)."""
    text = (docs / src).read_text(encoding="utf-8")
    if text.startswith("---\n"):
        text = text[text.index("\n---\n", 4) + 5 :]
    text = re.sub(r"^## References\b.*?(?=^## |\Z)", "", text, flags=re.S | re.M)
    parts: list[str | Block] = []
    at = 0
    for m in _FENCE.finditer(text):
        parts.append(_strip_prose(text[at : m.start()]))
        at = m.end()
        language, options, body = m.group(2), m.group(3), m.group(4)
        shown = language == "python" and ('exec="on"' not in options or "source=" in options)
        if not shown or "--8<--" in body:  # a whole module included as a file: the package's code, not a demo
            # a block that prints a name's source shows the reader that name's code: as good as naming it
            parts += [f"`{name}`" for name in re.findall(r"getsource\(\s*(?:\w+\.)*(\w+)\s*\)", body)]
            continue
        indent = len(m.group(1))
        code = "\n".join(line[indent:] for line in body.splitlines())
        parts.append(Block(code, code_names(code), code_abbreviations(code)))
    parts.append(_strip_prose(text[at:]))
    merged: list[str | Block] = []
    for part in parts:  # prose around a hidden block is one stretch of prose to the reader
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += "\n\n" + part
        else:
            merged.append(part)
    return Page(src, merged, "glossary.md" in text)


_CODE_LIKE = re.compile(  # fit_single_head, LatentCache, nn.Linear: words no English word looks like
    r"(?<![\w.`])(?:[A-Za-z]\w*_\w*|[A-Z][a-z0-9]+[A-Z]\w*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w`])"
)


def prose_names(prose: str) -> set[str]:
    """The code names the prose mentions: every identifier in inline code (`nn.Linear` gives nn.Linear, nn and
    Linear), and in plain text the words no English word looks like (an underscore, an inner capital, a dot)."""
    found: set[str] = set()
    for span in re.findall(r"`([^`\n]+)`", prose):
        found |= set(_IDENTIFIER.findall(span))
        found |= {m.group() for m in re.finditer(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", span)}
    plain = re.sub(r"`[^`\n]*`", " ", re.sub(r"\]\([^)]*\)", "]", prose))
    for m in _CODE_LIKE.finditer(plain):
        found.add(m.group())
        found |= set(m.group().split("."))
    return found


def prose_sentences(prose: str) -> list[Sentence]:
    """Sentences of Markdown prose, code spans dropped, bold marked as test_terms marks it."""
    prose = re.sub(r"`[^`\n]*`", " ", prose)
    prose = re.sub(r"(?<!\*)\*[A-Z]+\*(?!\*)", " ", prose)  # *AX*: a variable, in italics as in the math
    prose = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", prose)
    marked = re.sub(r"\*\*(.+?)\*\*", r"⟦b⟧\1⟦/b⟧", prose, flags=re.S)
    found = []
    for block in re.split(r"\n\s*\n", marked):
        block = re.sub(r"\s+", " ", block).strip()
        for part in re.split(r"(?<=[.!?:;])\s+(?=[A-Z(\"“⟦])", block):
            plain = re.sub(r"⟦[^⟧]*⟧", "", part).replace("*", "").strip()
            if plain:
                found.append(Sentence(plain, part))
    return found


def _initials(words: list[str]) -> str:
    return "".join(w[0].lower() for w in words)


def spells_out(sentence: Sentence, abbreviation: str) -> bool:
    """The sentence spells the abbreviation out: its words' initials, just before or after it, or a definition."""
    if defines(sentence, term_pattern(abbreviation)):
        return True
    if re.search(rf"\w[\w'’-]*\s+\({re.escape(abbreviation)}\)", sentence.text):  # "main memory (HBM)"
        return True
    letters = abbreviation.lower()
    for m in re.finditer(rf"(?<![\w-]){re.escape(abbreviation)}(?!\w)", sentence.text):
        before = re.findall(r"[A-Za-z]+", sentence.text[: m.start()])[-2 * len(letters) :]
        after = re.findall(r"[A-Za-z]+", sentence.text[m.end() :])[: 2 * len(letters)]
        for words in (before[i:] for i in range(len(before))):  # the words that end just before it
            if _covers(_initials(words), letters):
                return True
        for words in (after[:i] for i in range(1, len(after) + 1)):  # the words that start just after it
            if _covers(_initials(words), letters):
                return True
    return False


def _covers(initials: str, letters: str) -> bool:
    """The letters, in order, among the initials, the first and last of each matching."""
    if not initials or initials[0] != letters[0] or initials[-1] != letters[-1]:
        return False
    rest = iter(initials)
    return all(letter in rest for letter in letters)


def prose_abbreviations(prose: str) -> list[tuple[str, Sentence]]:
    """Each abbreviation the prose uses, with the sentence of its first use (glossary terms' words left out)."""
    seen: dict[str, Sentence] = {}
    for sentence in prose_sentences(prose):
        text = _GLOSSARY_TERMS.sub(" ", sentence.text)
        for abbreviation in _ABBREVIATION.findall(text):
            seen.setdefault(abbreviation, sentence)
    return list(seen.items())


_TERMS = sorted(glossary_terms(), key=len, reverse=True)
_GLOSSARY_TERMS = re.compile("|".join(term_pattern(t).pattern for t in _TERMS))


@dataclass
class Known:
    """What the reader has been told so far: code names seen in prose, abbreviations spelled out."""

    names: set[str] = field(default_factory=set)
    spelled: set[str] = field(default_factory=set)

    def learn(self, prose: str, abbreviations: set[str]) -> None:
        self.names |= prose_names(prose)
        for sentence in prose_sentences(prose):
            self.spelled |= {a for a in abbreviations if a in sentence.text and spells_out(sentence, a)}

    def copy(self) -> Known:
        return Known(set(self.names), set(self.spelled))


def uses(page: Page) -> set[str]:
    """Every checked name and abbreviation the page uses: in its shown code, and for abbreviations its prose."""
    found: set[str] = set()
    for part in page.parts:
        if isinstance(part, Block):
            found |= part.names | part.abbreviations
        else:
            found |= {a for a, _ in prose_abbreviations(part)}
    return found


def recurring(pages: list[Page], exempt: dict[str, str] = EXEMPT) -> set[str]:
    """The names and abbreviations two or more lessons use: the vocabulary a reader meets again."""
    count: dict[str, int] = {}
    for page in pages:
        for name in uses(page):
            count[name] = count.get(name, 0) + 1
    return {name for name, n in count.items() if n >= 2 and name not in exempt}


def unexplained(pages: list[Page], glossary: str, exempt: dict[str, str] = EXEMPT) -> list[str]:
    """Each page's first unexplained use of a recurring name or abbreviation, as 'page: kind name: where'."""
    checked = recurring(pages, exempt)
    from_glossary = Known()
    from_glossary.learn(glossary, checked)
    problems: list[str] = []
    known = Known()  # from earlier lessons
    for page in pages:
        here = known.copy()
        if page.links_glossary:
            here.names |= from_glossary.names
            here.spelled |= from_glossary.spelled
        reported: set[str] = set()
        for i, part in enumerate(page.parts):
            if isinstance(part, str):
                for abbreviation, sentence in prose_abbreviations(part):
                    if abbreviation in checked - here.spelled - reported and not spells_out(sentence, abbreviation):
                        problems.append(f"{page.src}: abbreviation {abbreviation}: {sentence.text[:140]}")
                        reported.add(abbreviation)
                here.learn(part, checked)
                continue
            after = page.parts[i + 1] if i + 1 < len(page.parts) else ""
            around = here.copy()
            around.learn(after if isinstance(after, str) else "", checked)
            where = f"in the block starting {part.code.strip().splitlines()[0][:80]!r}"
            for name in sorted(part.names & checked - reported):
                if name not in around.names and name.split(".")[-1] not in around.names:
                    problems.append(f"{page.src}: code name {name}: {where}")
                    reported.add(name)
            for abbreviation in sorted(part.abbreviations & checked - around.spelled - reported):
                problems.append(f"{page.src}: abbreviation {abbreviation} in code: {where}")
                reported.add(abbreviation)
        for part in page.parts:
            if isinstance(part, str):
                known.learn(part, checked)
    return problems


def _glossary_prose(path: Path = DOCS / "glossary.md") -> str:
    text = path.read_text(encoding="utf-8")
    return _strip_prose(text[text.index("\n---\n", 4) + 5 :])


def test_no_code_name_or_abbreviation_is_used_before_it_is_explained() -> None:
    problems = unexplained([read_page(src) for src in LESSONS], _glossary_prose())
    assert problems == [], f"{len(problems)} unexplained:\n" + "\n".join(problems)


def test_the_check_tells_explained_from_unexplained(tmp_path: Path) -> None:
    (tmp_path / "one.md").write_text(
        "---\ntitle: One\n---\n\nThe layer keeps its maps in `qkv_proj`. "
        "PyTorch's fused kernel is scaled dot-product attention (SDPA).\n\n"
        '```python exec="on" source="above" result="text"\n'
        "from torch import nn\n"
        "from lessons_src import MultiHeadAttention\n"
        "mha = MultiHeadAttention(8, 2)\n"
        "w = mha.qkv_proj.weight  # SDPA reads it\n"
        "print(mha.head_dim, w.shape, nn.Linear(2, 2))  # the FFN is elsewhere\n"
        "```\n\n`MultiHeadAttention` is the package's layer.\n",
        encoding="utf-8",
    )
    (tmp_path / "two.md").write_text(
        "---\ntitle: Two\n---\n\nSDPA again, and GQA (grouped-query attention); the MLP, FFN here, is per position.\n\n"
        '```python exec="on" source="above"\nfrom torch import nn\nfrom lessons_src import MultiHeadAttention\n'
        "from lessons_src.lab.lesson_tools import fmt_table  # one lesson only: not checked\n"
        "print(nn.Linear(2, 2), MultiHeadAttention(8, 2).head_dim, fmt_table)  # the FFN\n```\n",
        encoding="utf-8",
    )
    pages = [read_page("one.md", tmp_path), read_page("two.md", tmp_path)]
    assert pages[0].parts[1].names == {"MultiHeadAttention", "qkv_proj", "head_dim", "nn.Linear"}  # type: ignore[union-attr]
    block = "in the block starting 'from torch import nn'"
    assert unexplained(pages, glossary="") == [
        f"one.md: code name head_dim: {block}",
        f"one.md: code name nn.Linear: {block}",
        f"one.md: abbreviation FFN in code: {block}",
        "two.md: abbreviation FFN: SDPA again, and GQA (grouped-query attention); the MLP, FFN here, is per position.",
        f"two.md: code name head_dim: {block}",
        f"two.md: code name nn.Linear: {block}",
    ]
    # explained just after the block: there and on every later page
    pages[0].parts[2] += " Its `head_dim` is E; the feed-forward network (FFN) is another layer."  # type: ignore[operator]
    assert unexplained(pages, glossary="") == [f"one.md: code name nn.Linear: {block}",
                                               f"two.md: code name nn.Linear: {block}"]
    # explained by the glossary, for the pages that link it
    glossary = "`nn.Linear` is PyTorch's linear layer."
    assert unexplained(pages, glossary) == unexplained(pages, glossary="")
    pages[1].links_glossary = True
    assert unexplained(pages, glossary) == [f"one.md: code name nn.Linear: {block}"]


def test_the_rules_pieces() -> None:
    sentence = prose_sentences("It is scaled dot-product attention (SDPA) in one call.")[0]
    assert spells_out(sentence, "SDPA")
    assert spells_out(prose_sentences("The MLP (the feed-forward network, FFN, in papers).")[0], "FFN")
    assert spells_out(prose_sentences("SDPA (scaled dot-product attention) is fused.")[0], "SDPA")
    assert not spells_out(prose_sentences("SDPA is PyTorch's fused attention call here.")[0], "SDPA")
    assert spells_out(prose_sentences("The **KV** heads are few.")[0], "KV")
    assert code_names("import torch\nx = torch.randn(2)\nx.sum()\nprint(len(x))") == set()
    assert code_names("from lessons_src.lab.lesson_tools import FEATURES, it_example\nex = it_example()\n"
                      "ex.tokens, ex.one_head") == {"it_example", "one_head"}
    assert code_abbreviations('FROM = 3\nprint(f"from {FROM} on, SDPA")  # the KV heads') == {"SDPA", "KV"}
