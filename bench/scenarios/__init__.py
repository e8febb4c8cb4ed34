"""Parts of the scenario harness (bench/scenario.py): processes and arrangements, report."""
