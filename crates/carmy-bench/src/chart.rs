//! `latest.png`: calls/s and p99 latency by concurrency for each scenario, with the pgbench
//! ceilings as dashed lines. Text is drawn with a TrueType font read at run time (DejaVu Sans or
//! Liberation Sans from Debian's font packages); without one, the chart has no text.

use crate::load::Scenario;
use crate::report::Report;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::Path;

/// Font files tried, in order.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers the first font found as `sans-serif`; false when there is none.
fn register_font() -> bool {
    for path in FONTS {
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        // plotters keeps fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
            return true;
        }
    }
    false
}

const COLORS: [RGBColor; 3] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
];
const CEILING_COLORS: [RGBColor; 2] = [RGBColor(0, 114, 178), RGBColor(120, 120, 120)];

type Panel<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// Draws the chart into `path` (PNG).
pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let text = register_font();
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|error| error.to_string())?;
    let root = if text {
        let title = format!(
            "carmy-gateway on PostgreSQL {} - {} CPUs shared by gateway, PostgreSQL and load - {:.0} s per point",
            report.server.version, report.cpus, report.settings.seconds
        );
        root.titled(&title, ("sans-serif", 22))
            .map_err(|error| error.to_string())?
    } else {
        root
    };
    let (left, right) = root.split_horizontally(700);
    throughput(report, &left, text)?;
    latency(report, &right, text)?;
    root.present().map_err(|error| error.to_string())
}

/// The concurrencies measured, in order.
fn concurrencies(report: &Report) -> Vec<usize> {
    let mut levels: Vec<usize> = report.runs.iter().map(|run| run.concurrency).collect();
    levels.sort_unstable();
    levels.dedup();
    levels
}

/// The points of `scenario`'s runs with the replay cache on (`cache`) or off.
fn series(
    report: &Report,
    scenario: Scenario,
    cache: bool,
    value: impl Fn(&crate::load::RunResult) -> Option<f64>,
) -> Vec<(SegmentValue<usize>, f64)> {
    let levels = concurrencies(report);
    report
        .runs
        .iter()
        .filter(|run| run.scenario == scenario && run.replay_cache == cache && run.group_commit)
        .filter_map(|run| {
            let index = levels.iter().position(|level| *level == run.concurrency)?;
            Some((SegmentValue::CenterOf(index), value(run)?))
        })
        .collect()
}

/// The x range: one segment per concurrency (a segmented range includes its end).
fn segments(levels: usize) -> std::ops::Range<usize> {
    0..levels.saturating_sub(1).max(1)
}

/// A log axis range covering `values` with some room.
fn log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (low, high) = values
        .filter(|value| value.is_finite() && *value > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    if !low.is_finite() {
        return 0.1..10.0;
    }
    (low / 4.0)..(high * 2.0)
}

fn throughput(report: &Report, area: &Panel<'_>, text: bool) -> Result<(), String> {
    let levels = concurrencies(report);
    let ceilings = [
        ("pgbench new_identity.sql", report.pgbench_new_identity.tps),
        ("pgbench read_one.sql", report.pgbench_read_one.tps),
    ];
    let y = log_range(
        report
            .runs
            .iter()
            .map(|run| run.calls_per_second)
            .chain(ceilings.iter().map(|(_, tps)| *tps)),
    );
    let mut builder = ChartBuilder::on(area);
    builder.margin(20);
    if text {
        builder
            .caption("calls per second (log scale)", ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(70);
    }
    let mut chart = builder
        .build_cartesian_2d(segments(levels.len()).into_segmented(), y.log_scale())
        .map_err(|error| error.to_string())?;
    mesh(&mut chart, &levels, text, "calls/s", |v| format!("{v:.0}"))?;
    for (index, (label, tps)) in ceilings.iter().enumerate() {
        let color = CEILING_COLORS[index];
        let line = [(SegmentValue::Exact(0), *tps), (SegmentValue::Last, *tps)];
        let drawn = chart
            .draw_series(DashedLineSeries::new(line, 10, 6, color.stroke_width(2)))
            .map_err(|error| error.to_string())?;
        if text {
            drawn
                .label(format!("{label}: {tps:.0} tps"))
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new([(0, 0), (7, 0)], color.stroke_width(2))
                        + PathElement::new([(12, 0), (19, 0)], color.stroke_width(2))
                });
        }
    }
    for (index, scenario) in [Scenario::NewIdentity, Scenario::Replay, Scenario::Conflict]
        .into_iter()
        .enumerate()
    {
        let points = series(report, scenario, true, |run| Some(run.calls_per_second));
        plot(&mut chart, points, COLORS[index], scenario.label(), text)?;
        let uncached = series(report, scenario, false, |run| Some(run.calls_per_second));
        hollow(&mut chart, uncached, COLORS[index], scenario, text)?;
    }
    legend(&mut chart, text)
}

fn latency(report: &Report, area: &Panel<'_>, text: bool) -> Result<(), String> {
    let levels = concurrencies(report);
    let y = log_range(
        report
            .runs
            .iter()
            .filter_map(|run| run.p99_ms)
            .chain(report.runs.iter().filter_map(|run| run.p50_ms)),
    );
    let mut builder = ChartBuilder::on(area);
    builder.margin(20);
    if text {
        builder
            .caption(
                "latency in ms (log scale): p99 solid, p50 thin",
                ("sans-serif", 20),
            )
            .x_label_area_size(40)
            .y_label_area_size(70);
    }
    let mut chart = builder
        .build_cartesian_2d(segments(levels.len()).into_segmented(), y.log_scale())
        .map_err(|error| error.to_string())?;
    mesh(&mut chart, &levels, text, "ms", |v| {
        if *v >= 10.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    })?;
    for (index, scenario) in [Scenario::NewIdentity, Scenario::Replay, Scenario::Conflict]
        .into_iter()
        .enumerate()
    {
        let color = COLORS[index];
        let p99 = series(report, scenario, true, |run| run.p99_ms);
        plot(
            &mut chart,
            p99,
            color,
            &format!("{} p99", scenario.label()),
            text,
        )?;
        let p50 = series(report, scenario, true, |run| run.p50_ms);
        chart
            .draw_series(LineSeries::new(p50, color.mix(0.6).stroke_width(1)))
            .map_err(|error| error.to_string())?;
        let uncached = series(report, scenario, false, |run| run.p99_ms);
        hollow(&mut chart, uncached, color, scenario, text)?;
    }
    legend(&mut chart, text)
}

type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<
        plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordusize>,
        plotters::coord::combinators::LogCoord<f64>,
    >,
>;

fn mesh(
    chart: &mut Chart<'_, '_>,
    levels: &[usize],
    text: bool,
    y_desc: &str,
    y_format: impl Fn(&f64) -> String,
) -> Result<(), String> {
    let x_format = |value: &SegmentValue<usize>| match value {
        SegmentValue::CenterOf(index) => levels
            .get(*index)
            .map_or_else(String::new, |level| format!("c={level}")),
        _ => String::new(),
    };
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0));
    if text {
        mesh.x_desc("concurrent callers")
            .y_desc(y_desc)
            .x_label_formatter(&x_format)
            .y_label_formatter(&y_format)
            .label_style(("sans-serif", 15));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|error| error.to_string())
}

fn plot(
    chart: &mut Chart<'_, '_>,
    points: Vec<(SegmentValue<usize>, f64)>,
    color: RGBColor,
    label: &str,
    text: bool,
) -> Result<(), String> {
    let drawn = chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
        .map_err(|error| error.to_string())?;
    if text {
        drawn
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    chart
        .draw_series(
            points
                .into_iter()
                .map(|point| Circle::new(point, 4, color.filled())),
        )
        .map_err(|error| error.to_string())?;
    Ok(())
}

/// Measurements with the replay cache off: hollow rings, no line.
fn hollow(
    chart: &mut Chart<'_, '_>,
    points: Vec<(SegmentValue<usize>, f64)>,
    color: RGBColor,
    scenario: Scenario,
    text: bool,
) -> Result<(), String> {
    if points.is_empty() {
        return Ok(());
    }
    let drawn = chart
        .draw_series(
            points
                .into_iter()
                .map(|point| Circle::new(point, 7, color.stroke_width(3))),
        )
        .map_err(|error| error.to_string())?;
    if text {
        drawn
            .label(format!("{}, replay cache off", scenario.label()))
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.stroke_width(2)));
    }
    Ok(())
}

fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, text: bool) -> Result<(), String> {
    if !text {
        return Ok(());
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|error| error.to_string())
}
