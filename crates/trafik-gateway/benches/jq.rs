//! jq's cost per gateway answer: the course's merge (lesson 12), a client view (lesson 14) and
//! the ambassador's mapping (lesson 15), each with the JSON read before and written after, as
//! the data plane runs them per request.
//!
//!   cargo bench -p trafik-gateway --bench jq

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use trafik_gateway::jq::{Expression, parse, text, write};
use trafik_gateway::parts::{Answer, Assembled, Missing, assemble};

const DURUM: &[u8] = br#"{"takipNo":"TR-4821","durum":"dagitimda","bolge":"35","guncellenme":"2026-03-11T08:24:00Z","rota":["34","41","35"]}"#;
const UCRET: &[u8] =
    br#"{"takipNo":"TR-4821","tarife":9600,"indirim":1440,"net":8160,"sozlesmeNo":"S7"}"#;
const MERGE: &str =
    ".durum + {ucret: (.ucret | if . then {tarife, indirim, net, sozlesmeNo} else null end)}";
const CARRIER: &[u8] = br#"{"code":"OFD","zone":"35","ts":1773217440}"#;
const MAPPING: &str = r#"{takipNo: $no} + if $status < 300
  then {durum: ({OFD: "dagitimda"}[.code]), bolge: .zone, guncellenme: (.ts | rfc3339ms)}
  else {hata: "bulunamadi"} end"#;

fn shaping(c: &mut Criterion) {
    let parts = [("durum", Missing::Fail), ("ucret", Missing::Null)];
    let merge = Expression::compile(MERGE, &["no"]).unwrap();
    let view = Expression::compile("{takipNo, durum, guncellenme}", &["no"]).unwrap();
    let mapping = Expression::compile(MAPPING, &["no", "status"]).unwrap();
    let answers = [
        Answer::Answered {
            status: 200,
            body: DURUM,
        },
        Answer::Answered {
            status: 200,
            body: UCRET,
        },
    ];
    let merged = |expression: &Expression| {
        let Assembled::Input { parts, .. } = assemble(&parts, &answers) else {
            unreachable!()
        };
        write(&expression.run(parts, [text("TR-4821")]).unwrap())
    };
    assert_eq!(merged(&merge).len(), 183);
    c.bench_function("merge two parts (parse, assemble, jq, write)", |b| {
        b.iter(|| black_box(merged(&merge)))
    });
    c.bench_function("merge and a client view", |b| {
        b.iter(|| {
            let Assembled::Input { parts, .. } = assemble(&parts, &answers) else {
                unreachable!()
            };
            let record = merge.run(parts, [text("TR-4821")]).unwrap();
            black_box(write(&view.run(record, [text("TR-4821")]).unwrap()))
        })
    });
    c.bench_function("ambassador mapping with rfc3339ms", |b| {
        b.iter(|| {
            let input = parse(CARRIER).unwrap();
            let values = [text("TR-4821"), trafik_gateway::jq::number(200)];
            black_box(write(&mapping.run(input, values).unwrap()))
        })
    });
}

criterion_group!(benches, shaping);
criterion_main!(benches);
