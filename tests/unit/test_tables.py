"""dlcp.tables: the text tables benchmarks and comparisons print."""

from dlcp.tables import format_table


def test_table_aligns_labels_left_values_right_and_formats_cells():
    text = format_table([{"name": "a", "kpps": 123.456, "note": None}, {"name": "long name", "kpps": 4000.0}])
    lines = text.splitlines()
    assert len(lines) == 4 and set(lines[1]) == {"─"}
    assert lines[0].split() == ["name", "kpps", "note"]
    assert lines[2].split() == ["a", "123.5", "-"] and lines[3].split() == ["long", "name", "4000", "-"]
    assert len({len(line) for line in lines[:2]}) == 1  # header as wide as the rule
    assert lines[2].index("123.5") + len("123.5") == lines[3].index("4000") + len("4000")  # right-aligned
    assert lines[2].startswith("a ") and lines[3].startswith("long name")  # labels left-aligned


def test_table_of_nothing_and_chosen_columns():
    assert format_table([]) == "(no rows)"
    assert format_table([{"a": 1, "b": 2}], ["b"]).splitlines()[-1].strip() == "2"


def test_a_wide_table_is_never_wrapped():
    row = {f"column{i}": "x" * 30 for i in range(12)}
    assert len(format_table([row]).splitlines()) == 3
