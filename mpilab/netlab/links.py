"""Links: what one node's link to the switch carries (the profiles), and how ``tc``
shapes it."""

from __future__ import annotations

from dataclasses import dataclass

from .host import _ns, _run


@dataclass(frozen=True)
class Link:
    """What one node's link to the switch carries (a profile, or one of your own).

    `rate_bit_s` None leaves the rate alone (as fast as the host moves bytes). `delay_us`,
    `jitter_us` and `loss_pct` are one way, and applied only where ``sch_netem`` exists.
    """

    name: str
    rate_bit_s: float | None
    delay_us: float = 0.0
    jitter_us: float = 0.0
    loss_pct: float = 0.0
    about: str = ""

    def __post_init__(self):
        if self.rate_bit_s is not None and not self.rate_bit_s > 0:
            raise ValueError(f"rate_bit_s must be positive or None, got {self.rate_bit_s!r}")
        for name in ("delay_us", "jitter_us", "loss_pct"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)!r}")
        if self.loss_pct > 100:
            raise ValueError(f"loss_pct is a percentage, got {self.loss_pct!r}")


PROFILES: dict[str, Link] = {
    "fast-ethernet": Link("fast-ethernet", 100e6, about="100 Mbit/s Fast Ethernet, the "
                          "network of the ping-pong paper's cluster"),
    "gige": Link("gige", 1e9, about="1 Gbit/s Gigabit Ethernet"),
    "10gbe": Link("10gbe", 10e9, about="10 Gbit/s Ethernet (above what one host's TCP "
                  "stack may move across a veth: check the measured rate)"),
    "unshaped": Link("unshaped", None, about="no shaping: as fast as this host's TCP stack "
                     "moves bytes between namespaces"),
}


def link_profile(link: str | Link) -> Link:
    """A :class:`Link` from a profile name (``fast-ethernet``, ``gige``, ``10gbe``,
    ``unshaped``) or a Link.

    Parameters
    ----------
    link : str or Link
        A key of :data:`PROFILES`, or a :class:`Link` (returned as it is).

    Returns
    -------
    Link
        The link's rate, delay, jitter and loss.

    Raises
    ------
    ValueError
        `link` names no profile.
    """
    if isinstance(link, Link):
        return link
    if link not in PROFILES:
        raise ValueError(f"unknown link profile {link!r}; the profiles are "
                         f"{', '.join(PROFILES)} (or pass a netlab.Link)")
    return PROFILES[link]


# ---------------------------------------------------------------------------------------
# shaping

def _tc_rate(bits: float) -> str:
    return f"{int(round(bits))}bit"


def _burst_bytes(rate_bit_s: float) -> int:
    """Token-bucket depth: what the link may send at once, before it meters.

    A wire has no bucket: every byte takes 8 / rate seconds. Up to 200 Mbit/s the bucket
    holds one millisecond at the rate (12.5 KB for Fast Ethernet; at least two frames),
    so a message larger than that is metered at the link's rate, as on a wire; tbf then
    splits veth's 64 KiB segments into frames, which costs little at such rates. Faster
    links get one 64 KiB segment and its frame (or half a millisecond at the rate), as
    splitting every segment there costs more processor time than this host has
    (measured here: 1 Gbit/s capped at 0.4-0.7 of its rate with a 62.5 KB bucket), at
    the price of up to 64 KiB passing unmetered when the link was idle.
    """
    if rate_bit_s <= 200e6:
        return int(max(2 * 1514, rate_bit_s / 8 * 0.001))
    return int(max(64 * 1024 + 1514, rate_bit_s / 8 * 0.0005))


def _shape(dev: str, link: Link, netem: bool, netns: str | None) -> list[str]:
    """Shape egress of `dev` (in `netns`, or the host's namespace); what was applied."""
    run = (lambda argv: _ns(netns, argv)) if netns else _run
    applied = []
    delay = link.delay_us > 0 or link.jitter_us > 0 or link.loss_pct > 0
    parent = ["root"]
    if netem and delay:
        em = ["netem"]
        if link.delay_us or link.jitter_us:
            em += ["delay", f"{link.delay_us:g}us"]
            if link.jitter_us:
                em += [f"{link.jitter_us:g}us"]
        if link.loss_pct:
            em += ["loss", f"{link.loss_pct:g}%"]
        run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *em])
        applied.append(" ".join(em[1:]) + " (netem)")
        parent = ["parent", "1:1", "handle", "10:"]
    if link.rate_bit_s:
        burst = _burst_bytes(link.rate_bit_s)
        run(["tc", "qdisc", "replace", "dev", dev, *parent, "tbf", "rate",
             _tc_rate(link.rate_bit_s), "burst", str(burst), "latency", "100ms"])
        applied.append(f"rate {link.rate_bit_s / 1e6:g} Mbit/s (tbf, burst {burst} B)")
    return applied


def _has_netem(netns: str) -> bool:
    """Whether this kernel accepts a netem qdisc (tried on a dummy device in `netns`)."""
    _ns(netns, ["ip", "link", "add", "probe0", "type", "dummy"], check=False)
    ok = _ns(netns, ["tc", "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"],
             check=False).returncode == 0
    _ns(netns, ["ip", "link", "delete", "probe0"], check=False)
    return ok
