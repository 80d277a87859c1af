"""BibTeX entries for the report's figures: ASCII-only, LaTeX-escaped, compiling with plain.bst.

Captions are long and full of symbols (ε, σ, √, %, _), so an entry's title is short (claim title and
figure name) and the caption is left to the report. Every entry names the commit that produced it,
with `-dirty` kept where the working tree had uncommitted changes, and the SHA-256 of the figure file,
which identifies the exact figure whatever commit it is later fetched from.

An entry's url is pinned to a commit that holds that exact figure (`figure_ref`): the previous figures.bib's
commit for the same key while the figure's SHA-256 is unchanged (so a shallow clone, or a machine without git,
rebuilds the file byte for byte), else the commit of the figure's last change when the file is committed and
clean, else the result's own commit with a note to rebuild the report once the figure is committed."""

from __future__ import annotations

import hashlib
import re
import subprocess
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


# The note of an entry whose figure was not committed: its url names the result's commit instead.
NOT_COMMITTED = "figure not yet committed"
_COMMIT = r"[0-9a-f]{40}|[0-9a-f]{64}"  # a full SHA-1 or SHA-256 object name


def _git(cwd: Path, *args: str) -> str | None:
    """A git command's output, or None where git is missing, fails or `cwd` is in no repository."""
    try:
        out = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def figure_commit(path: Path) -> str | None:
    """The commit of the file's last change, when the file is committed and unchanged in the working tree;
    None when it is untracked, ignored, modified, missing, or git cannot tell."""
    if not path.is_file():
        return None
    status = _git(path.parent, "status", "--porcelain", "--", path.name)
    if status is None or status.strip():
        return None
    commit = (_git(path.parent, "log", "-1", "--format=%H", "--", path.name) or "").strip()
    return commit if re.fullmatch(_COMMIT, commit) else None


def pinned_commits(previous: str) -> dict[str, tuple[str, str]]:
    """Key -> (figure SHA-256, commit) of a figures.bib's entries whose url pins a figure's commit."""
    out = {}
    for key, body in re.findall(r"^@misc\{([^,\s]+),\n(.*?)^\}", previous, re.M | re.S):
        url = re.search(rf"^  url = \{{.*/blob/({_COMMIT})/", body, re.M)
        digest = re.search(r"figure file SHA-256 ([0-9a-f]+)", body)
        if url and digest and NOT_COMMITTED not in body:
            out[key] = (digest.group(1), url.group(1))
    return out


def figure_ref(
    path: Path, digest: str | None, kept: tuple[str, str] | None, commit: str | None
) -> tuple[str, str]:
    """(the url's commit, a note or "") for one figure: the previous entry's commit while the figure's digest
    is unchanged, else the commit of its last change, else the result's commit with a note saying so."""
    if digest and kept and kept[0] == digest:
        return kept[1], ""
    pinned = figure_commit(path)
    if pinned:
        return pinned, ""
    base = (commit or "").removesuffix("-dirty")
    if not base:
        return "main", f"{NOT_COMMITTED}; rebuild the report after committing it"
    return base, f"{NOT_COMMITTED} at {base[:12]}; rebuild the report after committing it"


def render_bib(
    results: list[dict], results_root: Path, repo_url: str, report_root: Path | None = None
) -> str:
    """One entry per figure of every result. With `report_root`, the report folder being rebuilt, the pinned
    commits of its figures.bib are kept for figures whose SHA-256 is unchanged."""
    try:
        kept = pinned_commits((report_root / "figures.bib").read_text()) if report_root is not None else {}
    except (OSError, UnicodeDecodeError):
        kept = {}
    entries = []
    for r in results:
        cid = r["claim_id"]
        for fig_id, f in r.get("figures", {}).items():
            name = Path(f["png"]).stem
            path = results_root / cid / f["png"]
            digest = file_digest(path)
            ref, unpinned = figure_ref(path, digest, kept.get(fig_id), r.get("git_commit"))
            note = latex_escape(
                f"Claim {cid}, verdict {r['verdict']}, profile {r['profile']}; "
                f"{commit_text(r.get('git_commit'))}"
                + (f"; figure file SHA-256 {digest}" if digest else "")
                + (f"; {unpinned}" if unpinned else "")
            )
            entries.append(
                figure_entry(
                    fig_id,
                    f"{r.get('title') or cid}: figure {name}",
                    f"{repo_url}/blob/{ref}/results/{cid}/{f['png']}",
                    (r.get("finished_at") or "2026")[:4],
                    note,
                )
            )
    return "\n\n".join(entries) + "\n"
