//! A route's `static = "DIR"` and `index`: files under a directory answer it, instead of a pool.

use trafik_proxy::TargetPlan;

use super::report::Report;
use super::schema::Route;

/// `None` when the route has no `static`; `Some(None)` when it has one that is wrong.
pub fn check(report: &mut Report, field: &str, route: &Route) -> Option<Option<TargetPlan>> {
    let Some(root) = &route.static_root else {
        if let Some(index) = &route.index {
            report.error(
                index.span(),
                &format!("{field}.index"),
                "`index` names the file a directory answers with on a static route; add static = \"DIR\" or remove it",
            );
        }
        return None;
    };
    let mut ok = true;
    if let Some(pool) = &route.pool {
        report.error(
            pool.span(),
            &format!("{field}.pool"),
            "a route is answered by a pool or by static files, not both: remove `pool` or `static`",
        );
        ok = false;
    }
    let path = report.path(root.get_ref());
    if !path.is_dir() {
        report.error(
            root.span(),
            &format!("{field}.static"),
            format!(
                "expected a directory (relative to the config file's folder), found {}",
                if path.exists() { "a file" } else { "nothing" }
            ),
        );
        ok = false;
    }
    let index = route.index.as_ref().map(|index| {
        let name = index.get_ref();
        if name.is_empty() || name.contains('/') || name == ".." || name == "." {
            report.error(
                index.span(),
                &format!("{field}.index"),
                format!("expected a file name such as \"index.html\", found {name:?}"),
            );
            ok = false;
        }
        name.clone()
    });
    Some(ok.then_some(TargetPlan::Static { root: path, index }))
}
