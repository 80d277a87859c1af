"""BibTeX entries for the report's figures: ASCII-only, LaTeX-escaped, compiling with plain.bst.

Captions are long and full of symbols (ε, σ, √, %, _), so an entry's title is short (claim title and
figure name) and the caption is left to the report. Every entry names the commit that produced it,
with `-dirty` kept where the working tree had uncommitted changes, and the SHA-256 of the figure file,
which identifies the exact figure whatever commit it is later fetched from."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path

# Characters with a meaning in LaTeX text, escaped (order matters: the backslash first).
_SPECIAL = [
    ("\\", r"\textbackslash{}"),
    ("{", r"\{"),
    ("}", r"\}"),
    ("#", r"\#"),
    ("$", r"\$"),
    ("%", r"\%"),
    ("&", r"\&"),
    ("_", r"\_"),
    ("^", r"\textasciicircum{}"),
    ("~", r"\textasciitilde{}"),
]
# Non-ASCII symbols the claims use, as plain-LaTeX math or text (no package needed).
_UNICODE = {
    "α": r"$\alpha$", "β": r"$\beta$", "γ": r"$\gamma$", "δ": r"$\delta$", "ε": r"$\epsilon$",
    "η": r"$\eta$", "θ": r"$\theta$", "λ": r"$\lambda$", "μ": r"$\mu$", "π": r"$\pi$", "ρ": r"$\rho$",
    "σ": r"$\sigma$", "Σ": r"$\Sigma$", "τ": r"$\tau$", "φ": r"$\phi$", "ω": r"$\omega$", "Δ": r"$\Delta$",
    "√": r"$\surd$", "×": r"$\times$", "·": r"$\cdot$", "−": "-", "–": "--", "—": "---", "≈": r"$\approx$",
    "≤": r"$\leq$", "≥": r"$\geq$", "≠": r"$\neq$", "±": r"$\pm$", "→": r"$\rightarrow$", "∞": r"$\infty$",
    "∈": r"$\in$", "²": r"$^2$", "³": r"$^3$", "½": r"$\frac{1}{2}$", "…": r"\ldots{}", "‖": r"$\|$",
    "‘": "`", "’": "'", "“": "``", "”": "''", "°": r"$^\circ$",
}  # fmt: skip


def latex_escape(text: str) -> str:
    """Plain text -> ASCII LaTeX that compiles in any document (unknown symbols lose their accents or go)."""
    out = []
    for ch in text:
        if ch in _UNICODE:
            out.append(_UNICODE[ch])
            continue
        for raw, esc in _SPECIAL:
            if ch == raw:
                out.append(esc)
                break
        else:
            if ord(ch) < 128:
                out.append(ch)
            else:  # é -> e; a symbol with no ASCII base is dropped
                out.append(unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode())
    return "".join(out)


def commit_text(commit: str | None) -> str:
    """The commit as recorded, `-dirty` included, with what that means spelled out."""
    if not commit:
        return "unknown commit"
    if commit.endswith("-dirty"):
        return f"commit {commit[:12]}-dirty (uncommitted changes in the working tree)"
    return f"commit {commit[:12]}"


def file_digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.exists() else None


def figure_entry(key: str, title: str, url: str, year: str, note: str) -> str:
    """One @misc entry; the key is kept as is (BibTeX keys may hold - and _)."""
    if not re.fullmatch(r"[A-Za-z0-9_:.\-]+", key):
        raise ValueError(f"not a BibTeX key: {key!r}")
    fields = [
        ("title", "{" + latex_escape(title) + "}"),  # inner braces keep the capitals under any style
        ("author", "{tfclaims contributors}"),
        ("year", year),
        ("howpublished", latex_escape("tfclaims report, figure " + key)),
        ("url", url),  # read raw by natbib/biblatex styles
        ("note", note),
    ]
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
    return f"@misc{{{key},\n{body}\n}}"


def render_bib(results: list[dict], results_root: Path, repo_url: str) -> str:
    """One entry per figure of every result."""
    entries = []
    for r in results:
        cid = r["claim_id"]
        for fig_id, f in r.get("figures", {}).items():
            name = Path(f["png"]).stem
            digest = file_digest(results_root / cid / f["png"])
            note = latex_escape(
                f"Claim {cid}, verdict {r['verdict']}, profile {r['profile']}; {commit_text(r.get('git_commit'))}"
                + (f"; figure file SHA-256 {digest}" if digest else "")
            )
            entries.append(
                figure_entry(
                    fig_id,
                    f"{r.get('title') or cid}: figure {name}",
                    f"{repo_url}/blob/main/results/{cid}/{f['png']}",
                    (r.get("finished_at") or "2026")[:4],
                    note,
                )
            )
    return "\n\n".join(entries) + "\n"
