"""Hostile input through a real TorchServe: each payload gets a 4xx JSON answer alone."""

from collections import Counter

from tests import support
from tests.e2e import hostile


def test_hostile_payloads_get_4xx_json_and_spare_their_batch_mates(server):
    cases = hostile.payloads()
    assert len(cases) >= 40 and len({kind for kind, *_ in cases}) >= 10
    good = [support.jpeg(support.frame(240, 320, seed)) for seed in range(8)]
    pid = server.worker_pids("frame_quality")
    rss = []
    for _ in range(4):
        payloads = [(body, content_type, headers) for _, _, body, content_type, headers, _ in cases]
        for i, body in enumerate(good):  # spread good frames through the burst
            payloads.insert(i * 7, (body, "image/jpeg", {"X-Frame-Id": f"good-{i}"}))
        responses = server.burst("frame_quality", payloads)
        statuses = Counter()
        for (body, content_type, headers), response in zip(payloads, responses):
            if headers.get("X-Frame-Id", "").startswith("good-"):
                assert response.status_code == 200, response.text
                support.assert_quality(response.json()["frames"][0]["outputs"], support.decoded(body))
                continue
            assert 400 <= response.status_code < 500, (content_type, headers, response.text)
            assert response.headers["content-type"] == "application/json"
            answer = response.json()
            assert answer["code"] == response.status_code and answer["type"] and answer["message"]
            statuses[answer["type"]] += 1
        assert server.get("/ping").json() == {"status": "Healthy"}
        rss.append(server.worker_rss_mb("frame_quality"))
    assert sum(statuses.values()) == len(cases)
    assert server.worker_pids("frame_quality") == pid, "the worker was restarted"
    assert rss[-1] - rss[1] < 30, f"worker memory grew across rounds: {rss} MiB"
