//! Line charts (SVG, plotters): panels of lines over a shared x axis, measured (solid, dotted) or
//! predicted (dashed), on a linear or a log y axis.

use std::path::Path;

use anyhow::Result;

/// A line of a [`line_chart`] panel.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Measured (solid, a dot per point) or predicted (dashed).
    pub measured: bool,
    /// Its colour, an index into plotters' `Palette99`.
    pub colour: usize,
}

/// A panel of a [`line_chart`]: lines over a shared x axis, on a linear or a log y axis (where
/// points at or below 0 are left out); the legend upper left, or lower right on a log axis (where a
/// latency curve rises to the right).
pub struct LinePanel {
    pub title: String,
    pub y_label: String,
    pub log_y: bool,
    pub lines: Vec<Line>,
}

/// The chart context of a line panel, with its y axis linear or log.
type LineContext<'a, Y> = plotters::prelude::ChartContext<
    'a,
    plotters::prelude::SVGBackend<'a>,
    plotters::prelude::Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
>;

/// Panels stacked one over the other, each of lines over `x_label`.
pub fn line_chart(path: &Path, x_label: &str, panels: &[LinePanel]) -> Result<()> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1200, 520 * panels.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    for (area, panel) in root.split_evenly((panels.len(), 1)).iter().zip(panels) {
        let points = || panel.lines.iter().flat_map(|l| l.points.iter());
        let xs = points().map(|p| p.0);
        let (x0, x1) = (
            xs.clone().fold(f64::MAX, f64::min),
            xs.fold(f64::MIN, f64::max),
        );
        let ys = points().map(|p| p.1).filter(|y| !panel.log_y || *y > 0.0);
        let (y0, y1) = (ys.clone().fold(f64::MAX, f64::min), ys.fold(0.0, f64::max));
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(&panel.title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70);
        let x = x0.min(x1)..x1.max(x0 + 1e-9);
        if panel.log_y {
            let y = (y0.min(y1) / 1.5).max(1e-9)..(y1 * 1.5).max(1e-6);
            let mut c = builder.build_cartesian_2d(x, y.log_scale())?;
            c.configure_mesh()
                .x_desc(x_label)
                .y_desc(&panel.y_label)
                .y_label_formatter(&|v| tick(*v))
                .draw()?;
            draw_lines(&mut c, panel)?;
        } else {
            let mut c = builder.build_cartesian_2d(x, 0.0..(y1 * 1.1).max(1e-9))?;
            c.configure_mesh()
                .x_desc(x_label)
                .y_desc(&panel.y_label)
                .draw()?;
            draw_lines(&mut c, panel)?;
        }
    }
    root.present()?;
    Ok(())
}

/// A log axis's label: a few significant digits, no trailing zeros.
fn tick(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        s.to_string()
    }
}

/// A panel's lines and their legend.
fn draw_lines<'a, Y>(c: &mut LineContext<'a, Y>, panel: &LinePanel) -> Result<()>
where
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    use plotters::prelude::*;
    for line in panel.lines.iter().filter(|l| !l.points.is_empty()) {
        let colour = Palette99::pick(line.colour).to_rgba();
        let style = colour.stroke_width(2);
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            .copied()
            .filter(|p| !panel.log_y || p.1 > 0.0)
            .collect();
        let legend = move |(x, y): (i32, i32)| PathElement::new(vec![(x, y), (x + 20, y)], style);
        if line.measured {
            c.draw_series(points.iter().map(|p| Circle::new(*p, 3, colour.filled())))?;
            c.draw_series(std::iter::once(PathElement::new(points, style)))?
                .label(&line.name)
                .legend(legend);
        } else {
            c.draw_series(std::iter::once(plotters::element::DashedPathElement::new(
                points, 6, 4, style,
            )))?
            .label(&line.name)
            .legend(legend);
        }
    }
    let position = if panel.log_y {
        SeriesLabelPosition::LowerRight
    } else {
        SeriesLabelPosition::UpperLeft
    };
    c.configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
