"""Hostile input through a real TorchServe: each payload gets its own expected answer, alone.

Memory is read once per round, with the worker idle (every answer of the round received), and
judged on those per-round floors, never on a single sample taken mid-batch.
"""

from tests import support
from tests.e2e import hostile
from tests.e2e.load import assert_bounded_growth, idle_rss_mb

ROUNDS = 6
LIMIT_MB = 30


def test_hostile_payloads_get_their_answer_and_spare_their_batch_mates(server):
    cases = hostile.payloads()
    assert len(cases) >= 40 and len({case.kind for case in cases}) >= 10
    good = [support.jpeg(support.frame(240, 320, seed)) for seed in range(8)]
    pid = server.worker_pids("frame_quality")
    floors = []
    for _ in range(ROUNDS):
        payloads = [(case.body, case.content_type, case.headers) for case in cases]
        expected: list[hostile.Case | None] = list(cases)
        for i, body in enumerate(good):  # spread good frames through the burst
            payloads.insert(i * 7, (body, "image/jpeg", {"X-Frame-Id": f"good-{i}"}))
            expected.insert(i * 7, None)
        responses = server.burst("frame_quality", payloads)
        for case, (body, _, _), response in zip(expected, payloads, responses):
            if case is None:
                assert response.status_code == 200, response.text
                support.assert_quality(response.json()["frames"][0]["outputs"], support.decoded(body))
                continue
            where = f"{case.kind}/{case.name}: {response.status_code} {response.text[:300]}"
            assert response.status_code == case.status, where
            assert response.headers["content-type"] == "application/json", where
            answer = response.json()
            if case.status == 200:
                assert answer["frames"], where
            else:
                assert (answer["code"], answer["type"]) == (case.status, case.type), where
                assert answer["message"], where
        assert server.get("/ping").json() == {"status": "Healthy"}
        floors.append(idle_rss_mb(server, "frame_quality"))
    assert server.worker_pids("frame_quality") == pid, "the worker was restarted"
    assert_bounded_growth(floors, LIMIT_MB)
