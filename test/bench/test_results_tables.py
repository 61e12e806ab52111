"""The README's performance summary and docs/results.md are what bench/results gives
(physai_bench.tables): a figure edited by hand, or a results file changed without the tables, fails
here. Each committed results file has the complete header the tables print."""
from pathlib import Path

import pytest

from physai_bench import tables
from physai_bench.results import Run, read_result, write_result

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def test_the_readme_summary_is_generated_from_the_results_files():
    text = (REPO / "README.md").read_text()
    assert tables.readme_with_table(text, tables.readme_table(RESULTS)) == text, (
        "README.md's performance summary differs from bench/results: run python bench/suite.py --tables")


def test_docs_results_is_generated_from_the_results_files():
    assert (REPO / "docs" / "results.md").read_text() == tables.results_doc(RESULTS), (
        "docs/results.md differs from bench/results: run python bench/suite.py --tables")


def test_every_summarised_result_has_its_file_and_a_complete_header():
    found = {name for name, _, _ in tables.collect(RESULTS)}
    assert found == set(tables.SUMMARISERS), f"results files missing: {set(tables.SUMMARISERS) - found}"
    for name in found:
        doc = read_result(RESULTS / f"{name}.json")
        assert doc["quick"] is False, f"{name}: a --quick run's figures are not results"


def test_a_results_file_without_its_header_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"rows": []}')
    with pytest.raises(ValueError, match="header lacks"):
        read_result(path)
    doc = write_result(path, Run(command="python bench/x.py", regime="r", quick=True), {"rows": [1]})
    assert read_result(path) == doc and doc["rows"] == [1]
    with pytest.raises(ValueError, match="header's keys"):
        write_result(None, Run(command="c", regime="r", quick=True), {"commit": "mine"})


def test_the_readme_markers_are_required():
    with pytest.raises(ValueError, match="markers"):
        tables.readme_with_table("# no markers\n", "| table |")
