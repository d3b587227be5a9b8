//! A small flash sale through SECKILL.TRY from Rust: 40 concurrent buyers (some twice) for
//! 10 units. Usage: `sale [redis://127.0.0.1:6379/]`. Exits non-zero if anything oversold.

use std::collections::HashSet;

fn main() -> redis::RedisResult<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let client = redis::Client::open(url)?;
    let mut con = client.get_connection()?;
    let key = "example:sale:rust";
    let _: () = redis::cmd("SECKILL.INIT")
        .arg(key)
        .arg(10)
        .arg("REPLACE")
        .query(&mut con)?;

    let buyers: Vec<_> = (0..40)
        .map(|i| {
            let client = client.clone();
            std::thread::spawn(move || -> redis::RedisResult<(String, i64)> {
                let mut con = client.get_connection()?;
                let user = format!("user-{}", i % 30);
                let reply: i64 = redis::cmd("SECKILL.TRY")
                    .arg(key)
                    .arg(&user)
                    .query(&mut con)?;
                Ok((user, reply))
            })
        })
        .collect();
    let mut winners = HashSet::new();
    for buyer in buyers {
        let (user, reply) = buyer.join().expect("buyer thread")?;
        match reply {
            r if r >= 0 => assert!(winners.insert(user), "a user bought twice"),
            -1 => {} // sold out
            -2 => {} // already bought
            other => panic!("unexpected reply {other}"),
        }
    }
    let info: Vec<redis::Value> = redis::cmd("SECKILL.INFO").arg(key).query(&mut con)?;
    let sold: i64 = redis::from_redis_value(info[5].clone())?;
    println!("rust example: {} winners, sold {sold} of 10", winners.len());
    assert_eq!((winners.len(), sold), (10, 10));
    Ok(())
}
