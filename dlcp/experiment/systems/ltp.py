"""LTP (arXiv 2305.04279), as this framework runs it: a loss-tolerant parameter-server transport
whose receiver stops waiting once an adaptive share arrived (Early Close, `dlcp.close = "early"`,
dlcp/transport/core/close.py) and whose PS fills a worker's lost values with its previous push's
(Bubble Filling, `dlcp.fill = "bubble"`). LTP runs on ordinary switches: one data queue
(`magnitude` tagging marks which packets may be lost). Out-of-order transmission and
acknowledgement are the bounded-loss transport's own (per-packet offsets, bitmaps)."""

from dlcp.experiment.systems import SystemEntry, register_system

register_system(
    SystemEntry(
        name="ltp",
        description="LTP (arXiv 2305.04279): PS transport with Early Close and Bubble Filling",
        settings={
            "dlcp.policy": "magnitude",
            "dlcp.close": "early",
            "dlcp.close_early_min": 0.0,
            "dlcp.close_early_max": 0.1,
            "dlcp.loss_budget": 0.1,
            "dlcp.iter_budget": 0.1,
            "dlcp.fill": "bubble",
        },
        modes=("ps",),
        source="arXiv 2305.04279 abstract [V]; the close threshold's rule and the filling ours [D]",
    )
)
