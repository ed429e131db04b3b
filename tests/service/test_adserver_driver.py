"""loadtest.adserver against the service: score → show → click later, books balanced."""

from __future__ import annotations

from loadtest.adserver import run


def test_the_ad_server_flow_balances_its_books(app_client):
    c = app_client()
    books, info = run(c, seconds=3.0, rate=150.0, slate=15, timeout_s=1.0, time_scale=0.02,
                      window_s=3.0, say=lambda _: None)
    assert books.kept == books.shown > 300
    assert books.clicks_accepted > 0 and books.late_clicks > 0  # some clicks came late
    assert books.problems(info) == []
