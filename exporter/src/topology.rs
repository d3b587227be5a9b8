//! Which nodes to read: the `--redis` nodes themselves, or, where one is a cluster node, every
//! node its `CLUSTER NODES` lists (masters and replicas, for `seckill_up`; sales are read on
//! masters that serve slots). Parsing is pure and unit-tested; the exporter asks again at each
//! scrape, so it follows failovers and resharding.

/// A node to read, as `HOST:PORT`, and whether its sales are to be read (a master serving slots,
/// or a standalone master).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub address: String,
    pub reads_sales: bool,
}

/// The nodes of a `CLUSTER NODES` reply. `seed_host` stands for a node listed without a host
/// (a node that has not learned its own IP yet prints `:PORT`). Nodes in handshake or without
/// an address are skipped; a failed master is kept (it is exactly the one to report down).
pub fn cluster_nodes(text: &str, seed_host: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            continue;
        }
        let flags: Vec<&str> = fields[2].split(',').collect();
        if flags.iter().any(|f| *f == "handshake" || *f == "noaddr") {
            continue;
        }
        // ip:port@cport[,hostname]
        let address = fields[1].split('@').next().unwrap_or_default();
        let Some((host, port)) = address.rsplit_once(':') else {
            continue;
        };
        if port.parse::<u16>().is_err() {
            continue;
        }
        let host = if host.is_empty() { seed_host } else { host };
        let master = flags.contains(&"master");
        let serves_slots = fields.len() > 8;
        nodes.push(Node {
            address: format!("{host}:{port}"),
            reads_sales: master && serves_slots,
        });
    }
    nodes.sort_by(|a, b| a.address.cmp(&b.address));
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1700000000000 4 connected
67ed 127.0.0.1:30002@40002 master - 0 1700000000000 2 connected 5461-10922
292f 127.0.0.1:30003@40003 master,fail - 1700000000000 1700000000000 3 disconnected 10923-16383
824f 127.0.0.1:30005@40005 master - 0 1700000000000 5 connected
e7d1 :30001@40001 myself,master - 0 0 1 connected 0-5460
aaaa 127.0.0.1:30006@40006 handshake - 0 0 0 connected
bbbb :0@0 master,noaddr - 0 0 0 disconnected
";

    #[test]
    fn masters_with_slots_read_sales_and_every_live_or_failed_node_is_listed() {
        assert_eq!(
            cluster_nodes(NODES, "10.0.0.1"),
            vec![
                Node {
                    address: "10.0.0.1:30001".into(),
                    reads_sales: true
                },
                Node {
                    address: "127.0.0.1:30002".into(),
                    reads_sales: true
                },
                Node {
                    address: "127.0.0.1:30003".into(),
                    reads_sales: true
                },
                Node {
                    address: "127.0.0.1:30004".into(),
                    reads_sales: false
                },
                Node {
                    address: "127.0.0.1:30005".into(),
                    reads_sales: false
                },
            ]
        );
    }

    #[test]
    fn hostnames_after_the_bus_port_and_garbage_lines() {
        let text =
            "cccc 127.0.0.1:7000@17000,shop-1 master - 0 0 1 connected 0-16383\nshort line\n";
        assert_eq!(
            cluster_nodes(text, "x"),
            vec![Node {
                address: "127.0.0.1:7000".into(),
                reads_sales: true
            }]
        );
        assert!(cluster_nodes("dddd host:notaport@1 master - 0 0 1 connected 0", "x").is_empty());
        assert!(cluster_nodes("", "x").is_empty());
    }
}
