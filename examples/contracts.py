"""Contracts: go through a batch of contracts and produce a risk list.

    longtask run examples/contracts.py:task --input '{"workdir": "/tmp/contracts"}'
    longtask status <thread>

Five steps in five stages:

- ``upload`` writes ``count`` small contracts to ``<workdir>/contracts/`` (generated from a
  fixed seed, so every run produces the same files) and returns their paths;
- ``parse`` is a **map step** over those paths: each contract is read and split into its
  parties and numbered clauses;
- ``extract`` is a map step over the parsed contracts: simple rules flag risky clauses;
- ``merge`` flattens the per-contract lists into one risk list, most severe first;
- ``report`` writes ``<workdir>/report.md`` and returns its path and the counts.

A map step is one graph node however many contracts there are. It keeps ``max_parallel``
contracts in flight (the next starts as soon as one is done), and each contract's result is
stored as soon as it is done: if the process dies half-way through ``parse``, ``longtask
resume <thread>`` parses only the contracts that had not finished.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from longtask import ItemContext, LongTask, Stage, StepContext, function_step, map_step

SEED = 2024
HOME_LAW = "England and Wales"
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


class Inputs(BaseModel):
    workdir: str = ".longtask/contracts"
    count: int = 40


# -- 1. upload: a deterministic batch of contracts ---------------------------------------------

SUPPLIERS = [
    "Globex Supplies",
    "Initech Services",
    "Umbrella Logistics",
    "Stark Components",
    "Wayne Facilities",
    "Hooli Cloud",
    "Vandelay Imports",
    "Soylent Catering",
]
# Repeated entries make a term more likely: most contracts are unremarkable.
LAWS = [HOME_LAW] * 6 + ["New York", "Singapore"]


def _clauses(rng: random.Random) -> list[tuple[str, str]]:
    """The clauses of one contract, as (title, text), with varied terms."""
    notice = rng.choice([30, 30, 60, 60, 90, 90, 120, 180])
    liability = rng.choice(
        [
            "The liability of each party is capped at the fees paid in the preceding 12 months.",
            "The liability of each party is capped at 2 times the annual fees.",
            "The liability of each party is capped at 1,000,000 GBP.",
            "The liability of the Supplier is capped at the annual fees.",
            "The liability of the Customer is unlimited.",
        ]
    )
    renewal = rng.choice(
        [
            "This Agreement does not renew automatically.",
            "This Agreement ends at the end of its term unless the parties agree otherwise.",
            "This Agreement renews automatically for successive one-year terms unless "
            "either party gives notice at least 30 days before the end of the term.",
            f"This Agreement renews automatically for successive one-year terms unless "
            f"either party gives notice at least {rng.choice([30, 60, 90])} days before "
            "the end of the term.",
            "This Agreement renews automatically for successive one-year terms.",
        ]
    )
    law = rng.choice(LAWS)
    days = rng.choice([14, 30, 30, 45, 60])
    clauses = [
        (
            "Termination",
            f"Either party may terminate this Agreement with {notice} days' written notice.",
        ),
        ("Liability", liability),
        ("Renewal", renewal),
        ("Governing law", f"This Agreement is governed by the laws of {law}."),
        ("Payment", f"Invoices are payable within {days} days of receipt."),
    ]
    rng.shuffle(clauses)
    return clauses


@function_step
def upload(ctx: StepContext) -> dict[str, Any]:
    """Write the batch. Safe to run again: the same seed writes the same files."""
    workdir = Path(ctx.inputs.workdir).resolve()
    folder = workdir / "contracts"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    files = []
    for n in range(1, ctx.inputs.count + 1):
        supplier = rng.choice(SUPPLIERS)
        lines = [
            f"CONTRACT C-{n:03d}",
            f'Parties: Northwind Ltd ("Customer") and {supplier} ("Supplier")',
            "",
        ]
        for number, (title, text) in enumerate(_clauses(rng), start=1):
            lines.append(f"{number}. {title}. {text}")
        path = folder / f"contract-{n:03d}.txt"
        path.write_text("\n".join(lines) + "\n")
        files.append(str(path))
    # Absolute paths: a resume from another directory still finds the files.
    return {"workdir": str(workdir), "files": files}


# -- 2. parse: one item per file ---------------------------------------------------------------

CLAUSE_RE = re.compile(r"^(?P<number>\d+)\. (?P<title>[^.]+)\. (?P<text>.+)$")
PARTIES_RE = re.compile(r'^Parties: (.+?) \("Customer"\) and (.+?) \("Supplier"\)$')


def contract_files(ctx: StepContext) -> list[str]:
    return list(ctx.result("upload")["files"])


@map_step(over=contract_files, max_parallel=8)
def parse(ctx: ItemContext, path: str) -> dict[str, Any]:
    """``path`` is ``ctx.item``, the file of this item; ``ctx.item_index`` its position."""
    lines = Path(path).read_text().splitlines()
    parties = PARTIES_RE.match(lines[1])
    if parties is None:
        raise ValueError(f"{path}: no parties line")
    clauses = []
    for line in lines[2:]:
        m = CLAUSE_RE.match(line)
        if m:
            clauses.append(
                {"number": int(m["number"]), "title": m["title"].lower(), "text": m["text"]}
            )
    return {
        "index": ctx.item_index,
        "file": path,
        "contract": lines[0].removeprefix("CONTRACT "),
        "parties": list(parties.groups()),
        "clauses": clauses,
    }


# -- 3. extract: one item per parsed contract --------------------------------------------------


def _days(text: str) -> int:
    m = re.search(r"(\d+) days", text)
    return int(m[1]) if m else 0


def _rules(title: str, text: str) -> list[tuple[str, str, str]]:
    """(severity, rule, detail) for every rule one clause breaks."""
    found = []
    if title == "liability" and "unlimited" in text:
        found.append(("high", "unlimited liability", "the Customer's liability is not capped"))
    if title == "renewal" and "renews automatically" in text and "notice" not in text:
        found.append(("high", "auto-renewal without notice", "no way to stop the renewal"))
    if title == "termination":
        days = _days(text)
        if days > 90:
            found.append(("medium", "long termination notice", f"{days} days' notice"))
    if title == "governing law":
        law = text.removeprefix("This Agreement is governed by the laws of ").rstrip(".")
        if law != HOME_LAW:
            found.append(("medium", "foreign governing law", law))
    if title == "payment":
        days = _days(text)
        if days < 30:
            found.append(("low", "short payment term", f"payable within {days} days"))
    return found


def parsed_contracts(ctx: StepContext) -> list[dict[str, Any]]:
    return list(ctx.result("parse"))


@map_step(over=parsed_contracts, max_parallel=8)
def extract(ctx: ItemContext, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The risks of one contract (``doc`` is ``ctx.item``); an empty list when it is clean."""
    return [
        {
            "contract": doc["contract"],
            "supplier": doc["parties"][1],
            "clause": f"{clause['number']}. {clause['title']}",
            "severity": severity,
            "rule": rule,
            "detail": detail,
        }
        for clause in doc["clauses"]
        for severity, rule, detail in _rules(clause["title"], clause["text"])
    ]


# -- 4. merge and report -----------------------------------------------------------------------


@function_step
def merge(ctx: StepContext) -> list[dict[str, Any]]:
    risks = [risk for per_contract in ctx.result("extract") for risk in per_contract]
    return sorted(risks, key=lambda r: (SEVERITY_ORDER[r["severity"]], r["contract"], r["rule"]))


@function_step
def report(ctx: StepContext) -> dict[str, Any]:
    risks = ctx.result("merge")
    contracts = len(ctx.result("parse"))
    flagged = {r["contract"] for r in risks}
    by_severity = Counter(r["severity"] for r in risks)
    by_rule = Counter(r["rule"] for r in risks)
    lines = [
        "# Contract risk report",
        "",
        f"Contracts reviewed: {contracts}. With risks: {len(flagged)} ({len(risks)} risks "
        f"in all). Clean: {contracts - len(flagged)}.",
        "",
        "| Severity | Count |",
        "|---|---|",
        *(f"| {s} | {by_severity[s]} |" for s in SEVERITY_ORDER),
        "",
        "| Rule | Count |",
        "|---|---|",
        *(f"| {rule} | {n} |" for rule, n in by_rule.most_common()),
        "",
        "## Risks, most severe first",
        "",
        "| # | Severity | Contract | Supplier | Clause | Rule | Detail |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {n} | {r['severity']} | {r['contract']} | {r['supplier']} | {r['clause']} "
            f"| {r['rule']} | {r['detail']} |"
            for n, r in enumerate(risks, start=1)
        ),
    ]
    path = Path(ctx.result("upload")["workdir"]) / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return {
        "report": str(path),
        "contracts": contracts,
        "flagged": len(flagged),
        "risks": len(risks),
        "by_severity": {s: by_severity[s] for s in SEVERITY_ORDER},
    }


task = LongTask(
    name="contracts",
    version="1",
    inputs=Inputs,
    stages=[
        Stage("ingest", [upload]),
        Stage("read", [parse]),
        Stage("review", [extract]),
        Stage("summarise", [merge]),
        Stage("publish", [report]),
    ],
)
