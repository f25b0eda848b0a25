//! B9's picture: throughput by connection count for each daemon and its
//! baseline, and the broker's memory by idle connections, drawn as one SVG.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::load::Report;

use super::b8::MemoryPoint;
use super::b9::{Curve, SCALING_CONNECTIONS};
use super::runs::median_of;

/// One half of the picture.
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// A drawing error as the suite reports it: with the file it was drawing.
type Fail<'f> = &'f dyn Fn(&dyn std::fmt::Display) -> anyhow::Error;

/// Draws the curves (left: requests per second against connections, log
/// scale; right: RSS against idle connections) into `path`.
pub(super) fn scaling(path: &Path, curves: &[Curve], memory: &[MemoryPoint]) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(720);
    throughput_chart(&left, curves, &fail)?;
    memory_chart(&right, memory, &fail)?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// Each daemon and its baseline: median requests per second at each of
/// [`SCALING_CONNECTIONS`], on a log scale of connections.
fn throughput_chart(left: &Area, curves: &[Curve], fail: Fail) -> Result<()> {
    let series: Vec<(String, Vec<(f64, f64)>)> = curves
        .iter()
        .flat_map(|curve| {
            let points = |runs: &[Vec<Report>]| {
                SCALING_CONNECTIONS
                    .iter()
                    .zip(runs)
                    .map(|(&c, r)| ((c as f64).log2(), median_of(r, |r| r.per_second) / 1e6))
                    .collect()
            };
            [
                (curve.baseline_name.to_string(), points(&curve.baseline)),
                (format!("{} ping", curve.name), points(&curve.target)),
            ]
        })
        .collect();
    let top = series.iter().flat_map(|(_, p)| p.iter().map(|p| p.1)).fold(0.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(left)
        .caption("ping throughput, window 64 per connection", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..9.5f64, 0f64..top.max(0.1))
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("connections")
        .y_desc("million requests / s")
        .x_labels(10)
        .x_label_formatter(&|x| {
            let n = 2f64.powf(*x).round() as usize;
            if SCALING_CONNECTIONS.contains(&n) { n.to_string() } else { String::new() }
        })
        .draw()
        .map_err(|e| fail(&e))?;
    let colours = [RGBColor(150, 150, 150), RGBColor(200, 60, 40), RGBColor(90, 90, 200), RGBColor(30, 140, 70)];
    for ((name, points), colour) in series.iter().zip(colours) {
        chart
            .draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(|e| fail(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| fail(&e))?;
    Ok(())
}

/// The broker's resident memory at each step of idle connections.
fn memory_chart(right: &Area, memory: &[MemoryPoint], fail: Fail) -> Result<()> {
    let max_conns = memory.iter().map(|p| p.connections).max().unwrap_or(1) as f64;
    let max_rss = memory.iter().map(|p| p.rss_mib).fold(0.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(right)
        .caption("btcp-broker memory, idle WebSocket agents", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..max_conns * 1.05, 0f64..max_rss.max(1.0))
        .map_err(|e| fail(&e))?;
    chart.configure_mesh().x_desc("idle connections").y_desc("RSS (MiB)").draw().map_err(|e| fail(&e))?;
    let points: Vec<(f64, f64)> = memory.iter().map(|p| (p.connections as f64, p.rss_mib)).collect();
    let colour = RGBColor(30, 140, 70);
    chart.draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2))).map_err(|e| fail(&e))?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(|e| fail(&e))?;
    Ok(())
}
