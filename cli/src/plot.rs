//! `bench --sweep ... --plot FILE.svg`: the sweep's medians (with each value's min-max),
//! the serial loop as a horizontal line and, for workers, the linear-scaling line, drawn
//! with `plotters`' SVG backend (text is written as SVG text: no font library is needed).

use crate::stepping::fmt_rate;
use crate::trace_file::{TraceFile, TraceFileError};
use crate::Error;
use plotters::prelude::*;
use std::path::Path;

/// The plot's data.
pub struct PlotData {
    /// The caption.
    pub title: String,
    /// The x axis's label.
    pub x_label: String,
    /// A logarithmic x axis (values spanning orders of magnitude).
    pub log_x: bool,
    /// The swept values, ascending.
    pub xs: Vec<f64>,
    /// Each value's median steps/s.
    pub medians: Vec<f64>,
    /// Each value's slowest run.
    pub mins: Vec<f64>,
    /// Each value's fastest run.
    pub maxs: Vec<f64>,
    /// The serial loop's median, with `--baseline`.
    pub serial: Option<f64>,
    /// The linear-scaling reference at each value (workers sweeps).
    pub linear: Option<Vec<f64>>,
}

/// The `--plot` path, checked before the runs: an `.svg` name in a place this user may
/// write (a file the check creates is removed again if the run fails).
pub fn check_path(path: &Path) -> Result<TraceFile, Error> {
    let svg = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if !svg {
        return Err(format!(
            "--plot {}: the plot is written as SVG, so the file name must end in .svg (checked before the run; \
             nothing was run)",
            path.display()
        )
        .into());
    }
    Ok(TraceFile::check_for("--plot", path).map_err(Box::<TraceFileError>::new)?)
}

/// Writes `data` to `path` as an SVG.
pub fn write_svg(path: &Path, data: &PlotData) -> Result<(), Error> {
    draw(path, data).map_err(|e| format!("cannot write the plot to {}: {e}", path.display()).into())
}

/// Where x sits on the axis: log2 of the value on a logarithmic axis.
fn axis_x(data: &PlotData, x: f64) -> f64 {
    if data.log_x {
        x.log2()
    } else {
        x
    }
}

/// The top of what the chart shows: the highest run or the serial loop, or the linear line
/// up to twice that (past it the line stops: the measured values stay readable). The y
/// axis goes 30% higher, room for the legend.
fn data_top(data: &PlotData) -> f64 {
    let measured = data.maxs.iter().chain(data.serial.iter()).copied().fold(1.0, f64::max);
    let linear = data.linear.as_ref().and_then(|l| l.last().copied()).unwrap_or(0.0);
    measured.max(linear.min(2.0 * measured))
}

/// The points of a line up to where it crosses `top` (that point included).
fn clip_line(points: &[(f64, f64)], top: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for &(x, y) in points {
        match out.last().copied() {
            Some((x0, y0)) if y > top => {
                out.push((x0 + (x - x0) * (top - y0) / (y - y0), top));
                break;
            }
            _ => out.push((x, y.min(top))),
        }
    }
    out
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw(path: &Path, data: &PlotData) -> DrawResult {
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let xs: Vec<f64> = data.xs.iter().map(|&x| axis_x(data, x)).collect();
    let (lo, hi) = (xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(0.0, f64::max));
    let pad = ((hi - lo) * 0.05).max(0.25);
    let top = data_top(data);
    let mut chart = ChartBuilder::on(&root)
        .caption(&data.title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d((lo - pad)..(hi + pad), 0f64..top * 1.3)?;
    let log_x = data.log_x;
    // Labels at whole numbers only (on a log axis, whole powers of two).
    let x_fmt = move |x: &f64| match (x.fract().abs() < 1e-9, log_x) {
        (false, _) => String::new(),
        (true, true) => format!("{}", 2f64.powf(*x).round()),
        (true, false) => format!("{x}"),
    };
    chart
        .configure_mesh()
        .max_light_lines(0)
        .x_desc(data.x_label.as_str())
        .y_desc("env steps per second")
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|y: &f64| fmt_rate(*y))
        .draw()?;
    draw_series(&mut chart, data, &xs, (lo - pad, hi + pad, top))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

type Chart<'a> = ChartContext<
    'a,
    SVGBackend<'a>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The medians with their min-max, the serial loop and the linear line, each labelled;
/// `span` is the x axis's ends and the top of the data (where the linear line stops).
fn draw_series(chart: &mut Chart<'_>, data: &PlotData, xs: &[f64], span: (f64, f64, f64)) -> DrawResult {
    let points: Vec<(f64, f64)> = xs.iter().copied().zip(data.medians.iter().copied()).collect();
    chart
        .draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))?
        .label("shmenv pool (median)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(PointSeries::of_element(points, 4, BLUE.filled(), &|c, s, st| Circle::new(c, s, st)))?;
    let ranges = xs
        .iter()
        .zip(data.mins.iter().zip(&data.maxs))
        .map(|(&x, (&lo, &hi))| PathElement::new(vec![(x, lo), (x, hi)], BLUE.mix(0.6).stroke_width(1)));
    chart
        .draw_series(ranges)?
        .label("min-max of the rounds")
        .legend(|(x, y)| PathElement::new(vec![(x + 10, y - 6), (x + 10, y + 6)], BLUE.mix(0.6)));
    if let Some(serial) = data.serial {
        let line = vec![(span.0, serial), (span.1, serial)];
        chart
            .draw_series(DashedLineSeries::new(line, 8, 5, BLACK.stroke_width(2)))?
            .label("serial loop (in-process, median)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    }
    if let Some(linear) = &data.linear {
        let line: Vec<(f64, f64)> = xs.iter().copied().zip(linear.iter().copied()).collect();
        let line = clip_line(&line, span.2);
        chart
            .draw_series(DashedLineSeries::new(line, 4, 4, RED.stroke_width(2)))?
            .label("linear scaling (fewest workers' median x workers)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_stops_where_it_leaves_the_chart() {
        let line = [(1.0, 10.0), (2.0, 20.0), (4.0, 40.0), (8.0, 80.0)];
        assert_eq!(clip_line(&line, 30.0), vec![(1.0, 10.0), (2.0, 20.0), (3.0, 30.0)]);
        assert_eq!(clip_line(&line, 100.0), line.to_vec());
    }
}
