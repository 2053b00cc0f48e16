//! Idle cost (`just bench-idle`): the CPU an idle host (without the
//! embedded model) burns per second, on each store engine, measured over
//! thirty seconds once it has served a few requests and settled, to the
//! nanosecond from each thread's schedstat. On PostgreSQL the database's
//! own processes are reported beside it, in 10 ms ticks (they include the
//! server's background work). `BENCH_STORE=sled|postgres` picks one
//! engine. Asserts nothing about time.

use std::time::Duration;

mod common;
use common::{
    Database, KEY, NO_MODEL, cpu_between, cpu_seconds_of, start_host_with, thread_cpu_ns,
};

const SETTLE: Duration = Duration::from_secs(3);
const MEASURE: Duration = Duration::from_secs(30);

/// Every host shares the master key (a store URL requires one).
const MASTER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn main() {
    common::block_on(async {
        let engines = match std::env::var("BENCH_STORE").as_deref() {
            Ok("sled") => vec!["sled"],
            Ok("postgres") => vec!["postgres"],
            _ => vec!["sled", "postgres"],
        };
        let mut lines = Vec::new();
        for engine in engines {
            lines.push(measure(engine).await);
        }
        println!();
        for line in lines {
            println!("{line}");
        }
    });
}

async fn measure(engine: &str) -> String {
    let database = match engine {
        "postgres" => Some(Database::create().await),
        _ => None,
    };
    let mut env = vec![("SWITCHYARD_MASTER_KEY", MASTER_KEY)];
    if let Some(db) = &database {
        env.push(("SWITCHYARD_STORE_URL", db.url.as_str()));
    }
    let host = start_host_with(&format!("{NO_MODEL}[webhooks]\nallow_private = []\n"), &env);
    // A host that has served something: its pools and caches are warm.
    let client = reqwest::Client::new();
    for path in ["/v1/me", "/v1/models", "/v1/teams"] {
        let sent = client
            .get(format!("{}{path}", host.base))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert!(sent.status().is_success(), "{path}: {}", sent.status());
    }
    tokio::time::sleep(SETTLE).await;
    let pid = host.child.id();
    let db_before = database.as_ref().map(|_| cpu_seconds_of("postgres"));
    let before = thread_cpu_ns(pid).expect("/proc");
    tokio::time::sleep(MEASURE).await;
    let used = cpu_between(&before, &thread_cpu_ns(pid).expect("/proc"));
    let per_second = |seconds: f64| seconds * 1e3 / MEASURE.as_secs_f64();
    let db = db_before.map_or(String::new(), |b| {
        format!(
            " (PostgreSQL's processes: {:.2} ms/s)",
            per_second(cpu_seconds_of("postgres") - b)
        )
    });
    drop(host);
    if let Some(db) = database {
        db.drop().await;
    }
    format!(
        "idle[{engine}]: {:.2} ms of CPU per second over {} s{db}",
        per_second(used),
        MEASURE.as_secs()
    )
}
