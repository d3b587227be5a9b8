//! A partitioned sale's life as a whole: the claim on its name, its partitions and the manifest
//! that records them (create, open, delete).

use super::PartitionedSale;
use crate::durability::Change;
use crate::error::{Error, Result};
use crate::keeping;
use crate::key;
use crate::link::{Blocking, Link, block_on};
use crate::protocol::MAX_PARTITIONS;
use crate::routing::partition_key;
use crate::spec::{MANIFEST_VERSION, SaleSpec};
use redis::{ConnectionLike, RedisResult, cmd};

/// How long a `create` holds a sale's name before its manifest is done (plus 1 ms per
/// partition): the name of a creator that died half way is free again after it.
pub const CREATE_CLAIM_MS: u64 = 5_000;

/// `HSETNX name partitions P`, and an expiry on the claim in the same step.
const CLAIM_SCRIPT: &str = "if redis.call('HSETNX', KEYS[1], 'partitions', ARGV[1]) == 1 then \
     redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end return 0";

impl PartitionedSale {
    /// Creates the sale `name`: its P partitions `{name/0}` .. `{name/P-1}` (each with its
    /// share of the stock, and its stream `{name/i}:events` with `events`), then the manifest
    /// hash `name`. Every argument is checked, and the module's presence and version too
    /// ([`Error::ModuleMissing`], [`Error::ModuleTooOld`]), before anything is written. Fails
    /// with [`Error::SaleExists`] if a manifest of that name exists. The name is claimed with
    /// an expiry that the finished manifest drops: a create that fails half way gives the name
    /// back at once, and one whose process died gives it back within [`CREATE_CLAIM_MS`] (plus
    /// a millisecond per partition).
    pub fn create<C: ConnectionLike>(
        con: &mut C,
        name: &str,
        spec: &SaleSpec,
    ) -> Result<PartitionedSale> {
        block_on(PartitionedSale::create_on(
            &mut Blocking(con),
            name,
            spec,
            false,
        ))
    }

    /// [`PartitionedSale::create`], deleting a sale of that name first (partitions, streams,
    /// manifest): Python's `create(..., replace=True)`.
    pub fn replace<C: ConnectionLike>(
        con: &mut C,
        name: &str,
        spec: &SaleSpec,
    ) -> Result<PartitionedSale> {
        block_on(PartitionedSale::create_on(
            &mut Blocking(con),
            name,
            spec,
            true,
        ))
    }

    pub(crate) async fn create_on<L: Link>(
        link: &mut L,
        name: &str,
        spec: &SaleSpec,
        replace: bool,
    ) -> Result<PartitionedSale> {
        check_name(name)?;
        spec.check()?;
        key::require_module(link).await?;
        if replace {
            PartitionedSale::delete_on(link, name).await?;
        }
        // The claim: whoever sets the manifest's first field owns the name, for a while.
        let claim_ms = CREATE_CLAIM_MS + u64::from(spec.partitions);
        let claimed: i64 = link
            .query(
                cmd("EVAL")
                    .arg(CLAIM_SCRIPT)
                    .arg(1)
                    .arg(name)
                    .arg(spec.partitions)
                    .arg(claim_ms),
            )
            .await?;
        if claimed == 0 {
            return Err(Error::SaleExists(name.to_string()));
        }
        let sale = PartitionedSale::with_spec(name, spec.clone());
        match sale.write_partitions_and_manifest(link).await {
            Ok(()) => Ok(sale.placed(link).await),
            Err(e) => {
                // Give the name back; should this fail too, the claim's expiry does.
                let _: RedisResult<()> = link.query(cmd("DEL").arg(name)).await;
                Err(e)
            }
        }
    }

    /// The partitions, then the manifest with its `ready` mark in one HSET, claim dropped.
    async fn write_partitions_and_manifest<L: Link>(&self, link: &mut L) -> Result<()> {
        let (name, spec) = (&self.name, &self.spec);
        for (index, key) in self.keys.iter().enumerate() {
            let index = index as u32;
            let mut init = spec.partition_init_command(key, index);
            if spec.events {
                init.arg("EVENTS").arg(format!("{key}:events"));
                if let Some(maxlen) = spec.events_maxlen {
                    init.arg("MAXLEN").arg(maxlen);
                }
            }
            // REPLACE: the claim is ours, so a partition already there is a leftover of a
            // deleted sale of this name, never a live one.
            init.arg("PARTITION")
                .arg(index)
                .arg("PARTITIONS")
                .arg(spec.partitions)
                .arg("MANIFEST")
                .arg(name)
                .arg("REPLACE");
            let _: () =
                keeping::kept_write(link, &init, (key, Change::Wrote), self.keeping()).await?;
        }
        let mut manifest = cmd("HSET");
        manifest.arg(name);
        for (field, value) in spec.manifest_fields(name) {
            manifest.arg(field).arg(value);
        }
        // Written last: a sale opens only once every partition exists.
        manifest.arg("ready").arg(1);
        let _: () = link.query(&manifest).await?;
        let _: () = link.query(cmd("PERSIST").arg(name)).await?;
        Ok(())
    }

    /// Opens the sale `name` from its manifest; checks the module's version too.
    pub fn open<C: ConnectionLike>(con: &mut C, name: &str) -> Result<PartitionedSale> {
        block_on(PartitionedSale::open_on(&mut Blocking(con), name))
    }

    pub(crate) async fn open_on<L: Link>(link: &mut L, name: &str) -> Result<PartitionedSale> {
        check_name(name)?;
        let fields: Vec<(String, String)> = match link.query(cmd("HGETALL").arg(name)).await {
            Err(e) if e.code() == Some("WRONGTYPE") => {
                let why = format!("{name}: not a partitioned sale's manifest ({e})");
                return Err(Error::BadManifest(why));
            }
            other => other?,
        };
        if fields.is_empty() {
            return Err(Error::NoSale(name.to_string()));
        }
        key::require_module(link).await?;
        let get = |field: &str| {
            fields
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, v)| v.as_str())
        };
        if get("ready").is_none() {
            return Err(Error::BadManifest(format!(
                "{name}: its creation did not finish; delete it and create it again"
            )));
        }
        if get("version") != Some(MANIFEST_VERSION) {
            return Err(Error::BadManifest(format!(
                "{name}: unknown manifest version"
            )));
        }
        let number = |field: &str| -> Result<u64> {
            get(field)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| Error::BadManifest(format!("{name}: bad {field}")))
        };
        let optional =
            |field: &str| -> Result<Option<u64>> { Ok(Some(number(field)?).filter(|&v| v > 0)) };
        let partitions = u32::try_from(number("partitions")?)
            .ok()
            .filter(|&p| (1..=MAX_PARTITIONS).contains(&p))
            .ok_or_else(|| Error::BadManifest(format!("{name}: bad partitions")))?;
        let spec = SaleSpec {
            stock: number("stock")?,
            partitions,
            limit: number("limit")?,
            hold_ms: optional("hold")?,
            start_ms: optional("start")?,
            end_ms: optional("end")?,
            events: number("events")? == 1,
            events_maxlen: optional("maxlen")?,
            queue: None,
        };
        // The waiting room; manifests written before it have none of these fields.
        let absent_is_zero = |field: &str| -> Result<u64> {
            match get(field) {
                None => Ok(0),
                Some(_) => number(field),
            }
        };
        let spec = if absent_is_zero("queue")? == 1 {
            let (users, per_ms) = (absent_is_zero("admit")?, absent_is_zero("per")?);
            let window = absent_is_zero("window")?;
            let presence = absent_is_zero("presence")?;
            spec.queue(crate::spec::QueueSpec {
                admit_rate: (users > 0 && per_ms > 0).then_some((users, per_ms)),
                window_ms: (window > 0).then_some(window),
                presence_ms: (presence > 0).then_some(presence),
            })
        } else {
            spec
        };
        if get("naming") != Some(partition_key(name, "<i>").as_str()) {
            return Err(Error::BadManifest(format!(
                "{name}: unknown partition naming"
            )));
        }
        Ok(PartitionedSale::with_spec(name, spec).placed(link).await)
    }

    /// Deletes the sale: partitions, streams, then the manifest (also a half-created one's).
    pub fn delete<C: ConnectionLike>(con: &mut C, name: &str) -> Result<()> {
        block_on(PartitionedSale::delete_on(&mut Blocking(con), name))
    }

    pub(crate) async fn delete_on<L: Link>(link: &mut L, name: &str) -> Result<()> {
        check_name(name)?;
        let partitions: Option<u32> = link.query(cmd("HGET").arg(name).arg("partitions")).await?;
        for index in 0..partitions.unwrap_or(0).min(MAX_PARTITIONS) {
            let key = partition_key(name, index);
            let _: () = link.query(cmd("DEL").arg(&key)).await?;
            let _: () = link.query(cmd("DEL").arg(format!("{key}:events"))).await?;
        }
        let _: () = link.query(cmd("DEL").arg(name)).await?;
        Ok(())
    }
}

/// A sale name becomes the manifest key and the hash tag of every partition: braces in it
/// would change which part of a key is hashed.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains(['{', '}']) {
        return Err(Error::InvalidArgument(format!(
            "sale name {name:?} must be non-empty and without braces"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("sale:1").is_ok());
        for bad in ["", "a{b", "a}b"] {
            assert!(matches!(check_name(bad), Err(Error::InvalidArgument(_))));
        }
        assert_eq!(partition_key("sale:1", 3), "{sale:1/3}");
    }
}
