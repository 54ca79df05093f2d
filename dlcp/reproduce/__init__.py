"""`dlcp reproduce`: the source papers' claims (experiments/papers/<claim>/claim.toml), our figure
for each beside theirs, and the verdict (docs/reproduce.md). claims.py reads a claim, fast.py
prices it with the alpha-beta models, full.py runs its packet-level series, verdict.py judges,
report.py writes reproduce.md / .html / .json."""
