"""The report: tables, figures and report.html, rebuilt from the results database alone.

Each experiment of the registry (`pqlab.experiment.registry()`) exports its tables and
figures and returns a `Section`; the report stitches the sections of the experiments present
in the run into one self-contained HTML file (figures and every table's CSV embedded), so
`pqlab report RUN` can rebuild it at any time and the file can be mailed on its own. It
opens with the summary a migration plan needs (`report.summary`, from each experiment's
`summarize`), then the warnings grouped by cause (`report.warnings`), then the experiments,
then the machine and the commands (`report.page`). Experiments build their sections with
`report.section`; longer report prose lives in `report/templates/*.html`
(`section.template(name)`), not in code. See docs/report.md.
"""
