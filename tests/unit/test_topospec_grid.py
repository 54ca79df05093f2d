"""2-D torus and mesh topologies: switches, ports, links and the equal-cost routes the runtime uses."""

import itertools

import pytest

from dlcp.experiment import config
from dlcp.experiment.config import ConfigError
from dlcp.network import pipeline_names as N
from dlcp.network import topology as topospec


def grid_hops(kind, dims, a, b):
    """Switch hops between grid points a and b, from the closed form (not from the graph)."""
    hops = 0
    for x, y, n in zip(a, b, dims):
        d = abs(x - y)
        hops += min(d, n - d) if kind == "torus" else d
    return hops


def position(dims, switch):
    i = int(switch[1:]) - 1
    return divmod(i, dims[1])


def test_torus_4x4_shape_and_ports():
    t = topospec.torus((4, 4), host_mbps=200, fabric_mbps=50)
    assert t.kind == "torus" and t.dims == (4, 4)
    assert len(t.switches) == 16 and len(t.hosts) == 16
    fabric = [ln for ln in t.links() if ln[2] in t.switches]
    assert len(fabric) == 32 and len(t.links()) == 48
    s1 = t.switches["s1"]
    assert s1.ports[1].peer == "h1" and s1.ports[1].rate_mbps == 200
    # s1 = (0,0): east s2, south s5, and the wrap-around links to s4 (west) and s13 (north)
    assert sorted(p.peer for p in s1.ports.values() if p.peer in t.switches) == ["s13", "s2", "s4", "s5"]
    assert all(len(s.ports) == 5 for s in t.switches.values())
    assert t.hosts["h7"].switch == "s7" and t.hosts["h7"].switch_port == 1
    # every port's peer points back at it
    for s in t.switches.values():
        for p in s.ports.values():
            if p.peer in t.switches:
                back = t.switches[p.peer].ports[p.peer_port]
                assert (back.peer, back.peer_port) == (s.name, p.port)


def test_mesh_4x4_has_no_wrap_links():
    t = topospec.mesh((4, 4), host_mbps=50, fabric_mbps=50)
    fabric = [ln for ln in t.links() if ln[2] in t.switches]
    assert len(fabric) == 2 * 4 * 3
    degree = {s.name: sum(p.peer in t.switches for p in s.ports.values()) for s in t.switches.values()}
    assert degree["s1"] == 2 and degree["s2"] == 3 and degree["s6"] == 4 and degree["s16"] == 2


@pytest.mark.parametrize("dims,fabric_links", [((2, 4), 8 + 4), ((2, 2), 4), ((1, 4), 4), ((3, 3), 18), ((1, 2), 1)])
def test_two_wide_torus_dimension_has_one_link_not_two(dims, fabric_links):
    t = topospec.torus(dims, 50, 50)
    fabric = [ln for ln in t.links() if ln[2] in t.switches]
    assert len(fabric) == fabric_links
    for s in t.switches.values():
        peers = [p.peer for p in s.ports.values()]
        assert len(peers) == len(set(peers)), f"{s.name} has parallel links"


@pytest.mark.parametrize(
    "kind,dims", [("torus", (4, 4)), ("mesh", (4, 4)), ("torus", (3, 5)), ("mesh", (2, 3)), ("torus", (2, 4))]
)
def test_routes_are_every_equal_cost_shortest_next_hop(kind, dims):
    t = getattr(topospec, kind)(dims, 50, 50)
    routes = t.routes()
    for sw, host in itertools.product(t.switches, t.hosts):
        dst_sw = t.hosts[host].switch
        here = position(dims, sw)
        ports = routes[sw][host]
        if sw == dst_sw:
            assert ports == (1,)
            continue
        d = grid_hops(kind, dims, here, position(dims, dst_sw))
        expected = tuple(
            sorted(
                p.port
                for p in t.switches[sw].ports.values()
                if p.peer in t.switches
                and grid_hops(kind, dims, position(dims, p.peer), position(dims, dst_sw)) == d - 1
            )
        )
        assert ports == expected, (sw, host)


def test_route_members_where_several_paths_exist():
    t = topospec.torus((4, 4), 50, 50)
    routes = t.routes()
    peers = {p.port: p.peer for p in t.switches["s1"].ports.values()}
    assert [peers[p] for p in routes["s1"]["h2"]] == ["s2"]
    assert sorted(peers[p] for p in routes["s1"]["h3"]) == ["s2", "s4"]  # two columns away: both ways round
    assert sorted(peers[p] for p in routes["s1"]["h11"]) == ["s13", "s2", "s4", "s5"]  # (2,2): four ways
    m = topospec.mesh((4, 4), 50, 50)
    mpeers = {p.port: p.peer for p in m.switches["s1"].ports.values()}
    assert sorted(mpeers[p] for p in m.routes()["s1"]["h16"]) == ["s2", "s5"]


def test_runtime_entries_of_a_torus_switch():
    cfg = config.validate({"name": "t"})  # links / dlcp / backend sections; the topology comes from torus()
    t = topospec.torus((4, 4), 50, 50)
    s1 = t.runtimes(cfg)["s1"]
    [lpm] = [e for e in s1["table_entries"] if e.get("match", {}).get("ipv4_dst") == ["10.0.0.11", 32]]
    assert lpm["action_params"]["size"] == 4
    members = [
        e
        for e in s1["table_entries"]
        if e["table"] == N.NHOP and e["match"]["nhop_group"] == lpm["action_params"]["group"]
    ]
    assert sorted(e["action_params"]["port"] for e in members) == [2, 3, 4, 5]
    assert [p["intf"] for p in s1["ports"]] == [f"s1-eth{k}" for k in range(1, 6)]
    assert t.to_json()["dims"] == [4, 4]


@pytest.mark.parametrize(
    "dims,message",
    [
        ((4,), "two integer dimensions"),
        ((0, 4), "two integer dimensions"),
        ((1, 1), "needs 2..254 switches"),
        ((16, 16), "needs 2..254 switches"),
        ((4.0, 4), "two integer dimensions"),
    ],
)
def test_bad_dims(dims, message):
    with pytest.raises(ConfigError, match=r"topology\.dims: .*" + message):
        topospec.torus(dims, 50, 50)
