"""The report: report.md, index.html, the README table, the summary forest plot and the BibTeX entries."""
