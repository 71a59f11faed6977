"""Smoke tests of the bench and the GPU check at tiny sizes, so neither can rot unnoticed."""

import json

from bench import run


def test_the_in_process_bench_runs_and_reports_targets(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert run.main(["--no-e2e", "--frames", "4", "--iterations", "1", "--resolution", "64x36",
                     "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stock   mixed npy      FAILS  RuntimeError: stack expects each tensor to be equal size" in text
    assert "in-process 720p npy: ours / stock" in text and "not measured" in text
    data = json.loads(out.read_text())
    rows = {(r["handler"], r["kind"]): r for r in data["in_process"]}
    assert len(rows) == 15
    assert rows[("trivial", "jpeg")]["statuses"] == {"200": 4} and rows[("decode", "jpeg")]["statuses"] == {"200": 4}
    ours = rows[("ours", "npy")]
    assert ours["frames_per_s"] > 0 and ours["statuses"] == {"200": 4}
    assert set(ours["stages_ms"]) == {"decode", "collate", "transfer", "model", "encode"}
    assert set(rows[("stock", "jpeg")]["stages_ms"]) == {"decode", "collate", "transfer", "model", "encode"}
    assert rows[("ours", "mixed")]["error"] is None and rows[("stock", "mixed")]["frames_per_s"] is None
    assert [t["met"] for t in data["targets"]][2] is None
