//! Plugin runtime figures (`just bench-plugins`): cold load of a precompiled
//! plugin, one render through `template-default` on a kept instance and on a
//! fresh one (and the same render natively, for the ratio), the same for
//! plugins started by `switchyard plugin new` in Rust, Python
//! (componentize-py) and JavaScript (jco), and a hot swap under a steady
//! render load. Prints medians; asserts nothing about time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;
mod scaffolds;

use switchyard::cfg::QueueConfig;
use switchyard::plugin::Spec;
use switchyard::plugin::Variable;
use switchyard::plugin::internals::Prepared;
use switchyard::plugin::internals::instance_store;
use switchyard::plugin::{Kind, Source, TEMPLATE_DEFAULT};
use switchyard::plugin::{Plugin, Plugins};

/// The team every render is for: calls reuse its kept instance, as a
/// team's deliveries do.
const TEAM: &str = "bench";

fn main() {
    common::block_on(run());
}

/// `template-default` as built in.
fn template_spec() -> Spec {
    Spec {
        name: TEMPLATE_DEFAULT.into(),
        kind: Kind::PayloadTemplate,
        version: env!("CARGO_PKG_VERSION").into(),
        limits: None,
        source: Source::Builtin,
        grant: None,
        bytes: switchyard_components::TEMPLATE_DEFAULT.to_vec(),
    }
}

/// The component at `BENCH_TEMPLATE_WASM`, if set: a variant of the renderer
/// to compare with the built-in. Its calls alternate with the built-in's, so
/// the machine's swings in speed (2 shared cores) fall on both alike.
fn variant_spec() -> Option<Spec> {
    let path = std::env::var("BENCH_TEMPLATE_WASM").ok()?;
    let mut spec = template_spec();
    spec.name = "template-variant".into();
    spec.bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    Some(spec)
}

/// A ~1 KB repository-dispatch style template using 12 variables.
fn workload() -> (String, Vec<Variable>) {
    let names = [
        "event_type",
        "event_author",
        "alias",
        "tag",
        "project_name",
        "entity_name",
        "artifact_collection_name",
        "artifact_version_string",
        "ACCESS_TOKEN",
        "SECRET",
    ];
    let mut fields: Vec<String> = names
        .iter()
        .map(|n| format!("\"{n}\": \"${{{n}}}\""))
        .collect();
    fields.push("\"version\": \"${artifact_version}\"".into());
    fields.push("\"accuracy\": ${artifact_metadata.accuracy}".into());
    fields.push("\"summary\": \"${entity_name}/${project_name}: ${event_type} by ${event_author} on ${artifact_version_string}\"".into());
    let mut template = format!(
        "{{\"event_type\": \"deploy\", \"client_payload\": {{{}}}",
        fields.join(", ")
    );
    while template.len() < 1000 {
        template.push_str(", \"padding\": \"lorem ipsum dolor sit amet consectetur\"");
    }
    template.push('}');
    let mut vars: Vec<Variable> = names
        .iter()
        .map(|n| Variable {
            name: n.to_string(),
            value: format!("\"value of {n} with \\\"quotes\\\"\""),
        })
        .collect();
    vars.push(Variable {
        name: "artifact_version".into(),
        value: r#"{"name":"resnet:v3","version":"v3"}"#.into(),
    });
    vars.push(Variable {
        name: "artifact_metadata".into(),
        value: r#"{"accuracy":0.93}"#.into(),
    });
    (template, vars)
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() - 1) as f64 * p) as usize]
}

async fn run() {
    let cache = tempfile::tempdir().unwrap();
    let plugins = Plugins::new(
        cache.path(),
        &QueueConfig {
            workers: 4,
            capacity: 4096,
        },
    )
    .await
    .unwrap();

    measure_loads(&plugins).await;

    // Render: on the team's kept instance, as in production.
    let (template, vars) = workload();
    let plugin = plugins.get(TEMPLATE_DEFAULT).unwrap();
    let (mut wasm, mut native) = measure_renders(&plugins, &plugin, (&template, &vars)).await;
    let mut empty = measure_fixed_costs(&plugins, &plugin).await;
    phases(&plugins, &plugin, &template, &vars).await;
    scaffolds::run(&plugins).await;
    let (wasm_p50, wasm_p99) = (median(&mut wasm), percentile(&mut wasm, 0.99));
    let native_p50 = median(&mut native);
    println!(
        "render {} B template, wasm p50:       {:>9.2} µs   (p99 {:.2} µs) target p50 < 20 µs, kept instance",
        template.len(),
        wasm_p50.as_secs_f64() * 1e6,
        wasm_p99.as_secs_f64() * 1e6
    );
    println!(
        "render \"{{}}\", per-call fixed cost p50: {:>6.2} µs",
        median(&mut empty).as_secs_f64() * 1e6
    );
    println!(
        "render, native Rust p50:             {:>9.2} µs",
        native_p50.as_secs_f64() * 1e6
    );
    println!(
        "ratio wasm / native (p50):           {:>9.1} x",
        wasm_p50.as_secs_f64() / native_p50.as_secs_f64()
    );

    hot_swap(&plugins, &template, &vars).await;
}

/// Loading: the first compiles and fills the cache; later loads deserialize.
async fn measure_loads(plugins: &Plugins) {
    let started = Instant::now();
    plugins.load(template_spec()).await.unwrap();
    let first = started.elapsed();
    let mut loads = Vec::new();
    for _ in 0..21 {
        let started = Instant::now();
        plugins.load(template_spec()).await.unwrap();
        loads.push(started.elapsed());
    }
    println!(
        "load, first (compile + cache write): {:>9.2} ms",
        first.as_secs_f64() * 1e3
    );
    println!(
        "load, precompiled (median of 21):    {:>9.2} ms   target < 10 ms",
        median(&mut loads).as_secs_f64() * 1e3
    );
}

/// Renders on the team's kept instance (and a variant's, if given),
/// alternating with the native renderer: the samples of each (WASM,
/// native), every output checked against the built-in's.
async fn measure_renders(
    plugins: &Plugins,
    plugin: &Plugin,
    (template, vars): (&str, &[Variable]),
) -> (Vec<Duration>, Vec<Duration>) {
    let reference = plugins
        .render_with(plugin, TEAM, template, vars)
        .await
        .unwrap();
    let pairs: Vec<(String, String)> = vars
        .iter()
        .map(|v| (v.name.clone(), v.value.clone()))
        .collect();
    assert_eq!(
        template_default::render(template, &pairs).unwrap(),
        reference,
        "wasm and native agree"
    );
    const CALLS: usize = 5000;
    let variant = load_variant(plugins).await;
    let contenders: Vec<&Plugin> = std::iter::once(plugin).chain(variant.as_deref()).collect();
    for _ in 0..300 {
        for p in &contenders {
            plugins.render_with(p, TEAM, template, vars).await.unwrap();
        }
    }
    // Native renders alternate with the WASM ones, so the ratio compares
    // calls made under the same conditions.
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(CALLS); contenders.len()];
    let mut native = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        for (p, samples) in contenders.iter().zip(&mut times) {
            let started = Instant::now();
            let out = plugins.render_with(p, TEAM, template, vars).await.unwrap();
            samples.push(started.elapsed());
            assert_eq!(out, reference, "{} renders as the built-in does", p.id());
        }
        let started = Instant::now();
        std::hint::black_box(
            template_default::render(std::hint::black_box(template), &pairs).unwrap(),
        );
        native.push(started.elapsed());
    }
    let mut wasm = times.swap_remove(0);
    if let Some(mut variant) = times.pop() {
        println!(
            "variant {}, interleaved: p50 {:.2} µs against the built-in's {:.2} µs",
            std::env::var("BENCH_TEMPLATE_WASM").unwrap(),
            median(&mut variant).as_secs_f64() * 1e6,
            median(&mut wasm).as_secs_f64() * 1e6,
        );
    }
    (wasm, native)
}

/// The variant named by BENCH_TEMPLATE_WASM, loaded, if one is.
async fn load_variant(plugins: &Plugins) -> Option<Arc<Plugin>> {
    let spec = variant_spec()?;
    let name = spec.name.clone();
    plugins.load(spec).await.unwrap();
    plugins.get(&name)
}

/// A call's fixed costs: the per-call WASI context alone, and a trivial
/// render on a fresh store and instance (its samples).
async fn measure_fixed_costs(plugins: &Plugins, plugin: &Plugin) -> Vec<Duration> {
    const CALLS: usize = 5000;
    // Building the per-call WASI context alone.
    let mut contexts = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        std::hint::black_box(switchyard::plugin::internals::State::new(64 << 20));
        contexts.push(started.elapsed());
    }
    println!(
        "per-call WASI context p50:           {:>9.2} µs",
        median(&mut contexts).as_secs_f64() * 1e6
    );

    // Fixed cost of a call: a store, an instance and a trivial render.
    let mut empty = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        plugins.render_with(plugin, TEAM, "{}", &[]).await.unwrap();
        empty.push(started.elapsed());
    }
    empty
}

/// Hot swap: 4 callers render through the queue while the plugin is
/// replaced 20 times.
async fn hot_swap(plugins: &Arc<Plugins>, template: &str, vars: &[Variable]) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    for _ in 0..4 {
        let (plugins, template, vars) = (plugins.clone(), template.to_string(), vars.to_vec());
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match plugins
                    .render(TEMPLATE_DEFAULT, TEAM, template.clone(), vars.clone())
                    .await
                {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        eprintln!("failed call: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    for i in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut spec = template_spec();
        spec.version = format!("swap-{i}");
        plugins.load(spec).await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.unwrap();
    }
    println!(
        "hot swap: 20 swaps under load, {} calls, {} failed   target 0 failed",
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
}

/// The same 1 KB call, 3000 times on one instance kept between calls.
async fn kept_instance(plugins: &Plugins, plugin: &Plugin, template: &str, vars: &[Variable]) {
    let Prepared::Template(pre) = &plugin.pre else {
        unreachable!()
    };
    let mut store = instance_store(plugins.runtime(), plugin);
    let instance = pre.instantiate_async(&mut store).await.unwrap();
    let mut kept = Vec::with_capacity(3000);
    for _ in 0..3000 {
        let started = Instant::now();
        std::hint::black_box(
            instance
                .switchyard_plugin_template()
                .call_render(&mut store, template, vars)
                .await
                .unwrap()
                .unwrap(),
        );
        kept.push(started.elapsed());
    }
    println!(
        "  kept instance, call, 1 KB p50:     {:>9.2} µs",
        median(&mut kept).as_secs_f64() * 1e6
    );
}

/// Where a fresh-instance call spends its time: store, instance, the call
/// itself (trivial and 1 KB), and dropping the store (which resets memory);
/// and the same call on an instance kept from the previous one.
pub async fn phases(plugins: &Plugins, plugin: &Plugin, template: &str, vars: &[Variable]) {
    let Prepared::Template(pre) = &plugin.pre else {
        unreachable!()
    };
    let mut times: [Vec<Duration>; 5] = Default::default();
    for i in 0..3000 {
        let t0 = Instant::now();
        let mut store = instance_store(plugins.runtime(), plugin);
        let t1 = Instant::now();
        let instance = pre.instantiate_async(&mut store).await.unwrap();
        let t2 = Instant::now();
        let (text, vars) = if i % 2 == 0 {
            (template, vars)
        } else {
            ("{}", &[][..])
        };
        std::hint::black_box(
            instance
                .switchyard_plugin_template()
                .call_render(&mut store, text, vars)
                .await
                .unwrap()
                .unwrap(),
        );
        let t3 = Instant::now();
        drop(store);
        let t4 = Instant::now();
        times[0].push(t1 - t0);
        times[1].push(t2 - t1);
        times[2 + i % 2].push(t3 - t2);
        times[4].push(t4 - t3);
    }
    kept_instance(plugins, plugin, template, vars).await;
    let names = [
        "new store",
        "instantiate",
        "call, 1 KB",
        "call, \"{}\"",
        "drop store",
    ];
    for (name, samples) in names.iter().zip(times.iter_mut()) {
        println!(
            "  phase {name:<12} p50:         {:>9.2} µs",
            median(samples).as_secs_f64() * 1e6
        );
    }
}
