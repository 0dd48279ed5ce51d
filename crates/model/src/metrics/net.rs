//! Network interfaces (/proc/net/dev).

use jitterscope_sources::system::netdev::NetDev;

use super::{metrics, pairs, rate};
use crate::eval::Ctx;
use crate::registry::Emit;

fn nets<'a>(cx: &Ctx<'a>) -> Vec<(&'a NetDev, Option<&'a NetDev>)> {
    let Some(c) = cx.cur.netdev.as_ref() else {
        return Vec::new();
    };
    let p = cx
        .prev
        .and_then(|p| p.netdev.as_ref())
        .map(|p| p.interfaces.as_slice());
    pairs(&c.interfaces, p, |d| &d.name)
}

fn net_rate(cx: &Ctx, out: &mut Emit, f: fn(&NetDev) -> u64) {
    for (c, p) in nets(cx) {
        rate(cx, out, &[&c.name], Some(f(c)), p.map(f), 1.0);
    }
}

metrics! {
    reads: NONE;
    RX_BYTES_PER_S = ("net.<iface>.rx_bytes_per_s", BytesPerSecond, Rate, "Bytes received per second (/proc/net/dev)", |cx, out| net_rate(cx, out, |d| d.rx_bytes)),
    TX_BYTES_PER_S = ("net.<iface>.tx_bytes_per_s", BytesPerSecond, Rate, "Bytes sent per second (/proc/net/dev)", |cx, out| net_rate(cx, out, |d| d.tx_bytes)),
    RX_PACKETS_PER_S = ("net.<iface>.rx_packets_per_s", PerSecond, Rate, "Packets received per second (/proc/net/dev)", |cx, out| net_rate(cx, out, |d| d.rx_packets)),
    TX_PACKETS_PER_S = ("net.<iface>.tx_packets_per_s", PerSecond, Rate, "Packets sent per second (/proc/net/dev)", |cx, out| net_rate(cx, out, |d| d.tx_packets)),
    RX_DROPS_PER_S = ("net.<iface>.rx_drops_per_s", PerSecond, Rate, "Received packets dropped per second (/proc/net/dev)", |cx, out| net_rate(cx, out, |d| d.rx_drop)),
    TX_DROPS_PER_S = ("net.<iface>.tx_drops_per_s", PerSecond, Rate, "Outgoing packets dropped per second (/proc/net/dev)", |cx, out| net_rate(cx, out, |d| d.tx_drop)),
    ERRORS_PER_S = ("net.<iface>.errors_per_s", PerSecond, Rate, "Receive and transmit errors per second (/proc/net/dev)", |cx, out| net_rate(cx, out, |d| d.rx_errs + d.tx_errs)),
}
