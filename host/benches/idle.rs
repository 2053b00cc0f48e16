//! Idle cost (`just bench-idle`): the CPU an idle host (without the
//! embedded model) burns per second, measured over thirty seconds after
//! start-up settles; /proc counts in 10 ms steps, hence the long window.
//! Asserts nothing about time.

use std::time::Duration;

mod common;
use common::{NO_MODEL, cpu_seconds, start_host};

const SETTLE: Duration = Duration::from_secs(3);
const MEASURE: Duration = Duration::from_secs(30);

fn main() {
    common::block_on(async {
        let host = start_host(&format!("{NO_MODEL}[webhooks]\nallow_private = []\n"));
        tokio::time::sleep(SETTLE).await;
        let pid = host.child.id();
        let before = cpu_seconds(pid).expect("/proc");
        tokio::time::sleep(MEASURE).await;
        let used = cpu_seconds(pid).expect("/proc") - before;
        println!(
            "idle[no model]: {:.2} ms of CPU per second over {} s",
            used * 1e3 / MEASURE.as_secs_f64(),
            MEASURE.as_secs()
        );
    });
}
