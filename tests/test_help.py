"""Every command's --help prints (argparse formats help texts with %, so a literal % in
an option's help must not break it) and names every option."""

from __future__ import annotations

import contextlib
import io

import pytest

from pqlab import cli
from pqlab.experiment import registry


def _commands() -> list[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


@pytest.mark.parametrize("command", _commands())
def test_help_prints(command):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    text = out.getvalue()
    assert text.startswith("usage:")
    # A literal % is written once: argparse's escape (%%) never reaches the user.
    assert "%%" not in text, [line for line in text.splitlines() if "%%" in line]
    for exp in registry():
        if exp.name == command:
            for option in exp.options:
                shown = option.metavar if option.positional else f"--{option.name}"
                assert shown in text, option.name


def test_a_percent_sign_in_an_option_help_is_printed_as_is():
    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
        cli.main(["ttlb", "--help"])
    assert "loss=1%," in "".join(text.getvalue().split())


def test_an_earlier_option_name_is_an_alias_on_the_command_line_and_in_suites():
    """`capacity --server-threads` (its earlier name) is `--server-cpus`, both listed in
    the help; a suite key may be either."""
    from pqlab.experiments import capacity
    from pqlab.experiments.capacity import plan as cap_plan

    exp = capacity.EXPERIMENT
    parser = cli.build_parser()
    for flag in ("--server-cpus", "--server-threads"):
        values = parser.parse_args(["capacity", flag, "2"])
        assert cap_plan.from_values(values).server_threads == [2], flag
    for key in ("server-cpus", "server-threads"):
        values = exp.values_from_suite({key: [1, 2]}, "step 1")
        assert cap_plan.from_values(values).server_threads == [1, 2], key
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["capacity", "--help"])
    assert "--server-cpus" in out.getvalue() and "--server-threads" in out.getvalue()
