//! What sealing private data costs, and the two secret-sharing crates it could use:
//! `cargo run --release -p tagma-crypto --example sharing`.
//!
//! First table: splitting a 32-byte key into n Shamir shares over GF(256) (threshold t) and
//! rebuilding it from t shares, with vsss-rs (what `tagma_crypto::sealing` uses) and blahaj,
//! in the same run, with the same ChaCha20 generator. Second table: every step of sealing and
//! reading a 64-byte private field through `tagma_crypto::sealing`, and what the writer's and
//! the reader's whole path would cost with blahaj's figures in place of vsss-rs's.
//! docs/benchmarks/confidentiality.md records the figures.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chacha20::ChaCha20Rng;
use chacha20::rand_core::SeedableRng;
use tagma_crypto::IdentityKey;
use tagma_crypto::sealing::{SealedSecret, Share, ShareReader, combine, seal};
use tagma_wire::PublicKey;
use vsss_rs::{Gf256, IdentifierGf256};

/// Mean time of `op` over enough runs to take about 300 ms, after a short warm-up.
fn time(op: &mut dyn FnMut()) -> Duration {
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(30) {
        op();
    }
    let start = Instant::now();
    let mut runs = 0u32;
    while start.elapsed() < Duration::from_millis(300) {
        op();
        runs += 1;
    }
    start.elapsed() / runs
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ops(d: Duration) -> f64 {
    1.0 / d.as_secs_f64()
}

/// The two crates' split and combine of a 32-byte key at (n, t).
struct SharingCost {
    vsss_split: Duration,
    vsss_combine: Duration,
    blahaj_split: Duration,
    blahaj_combine: Duration,
}

fn sharing_cost(n: usize, t: usize) -> SharingCost {
    let key = [0x5a_u8; 32];
    let mut rng = ChaCha20Rng::from_seed([7; 32]);
    let ids = || (1..=n).map(|x| IdentifierGf256(Gf256(x as u8)));
    let vsss_split = time(&mut || {
        let shares =
            Gf256::split_bytes_with_participant_ids_iter(t, n, black_box(&key), &mut rng, ids())
                .unwrap();
        black_box(shares);
    });
    let vsss_shares =
        Gf256::split_bytes_with_participant_ids_iter(t, n, key, &mut rng, ids()).unwrap();
    assert_eq!(Gf256::combine_bytes(&vsss_shares[..t]).unwrap(), key);
    let vsss_combine = time(&mut || {
        black_box(Gf256::combine_bytes(black_box(&vsss_shares[..t])).unwrap());
    });

    let sharks = blahaj::Sharks(t as u8);
    let blahaj_split = time(&mut || {
        let shares: Vec<blahaj::Share> = sharks
            .dealer_rng(black_box(&key), &mut rng)
            .take(n)
            .collect();
        black_box(shares);
    });
    let blahaj_shares: Vec<blahaj::Share> = sharks.dealer_rng(&key, &mut rng).take(n).collect();
    assert_eq!(sharks.recover(&blahaj_shares[..t]).unwrap(), key);
    let blahaj_combine = time(&mut || {
        black_box(sharks.recover(black_box(&blahaj_shares[..t])).unwrap());
    });
    SharingCost {
        vsss_split,
        vsss_combine,
        blahaj_split,
        blahaj_combine,
    }
}

/// Every step of sealing and reading a private field at (n, t).
struct PathCost {
    seal: Duration,
    open_share: Duration,
    reseal_share: Duration,
    open_reply: Duration,
    combine: Duration,
}

fn path_cost(n: usize, t: usize) -> PathCost {
    const AAD: &[u8] = b"space | public part of the tuple";
    const CONTEXT: &[u8] = b"read request";
    let plaintext = [0x42_u8; 64];
    let keys: Vec<IdentityKey> = (0..n)
        .map(|i| IdentityKey::from_seed([i as u8 + 1; 32]))
        .collect();
    let replicas: Vec<PublicKey> = keys.iter().map(IdentityKey::public).collect();
    let seal_time = time(&mut || {
        black_box(seal(black_box(&plaintext), AAD, &replicas, t).unwrap());
    });
    let sealed: SealedSecret = seal(&plaintext, AAD, &replicas, t).unwrap();
    let open_share = time(&mut || {
        black_box(keys[0].open_share(black_box(&sealed), 0).unwrap());
    });
    let reader = ShareReader::new();
    let own = keys[0].open_share(&sealed, 0).unwrap();
    let reseal_share = time(&mut || {
        black_box(
            keys[0]
                .reseal_share(black_box(&own), &reader.public(), CONTEXT)
                .unwrap(),
        );
    });
    let reply = keys[0]
        .reseal_share(&own, &reader.public(), CONTEXT)
        .unwrap();
    let open_reply = time(&mut || {
        black_box(
            reader
                .open_reply(0, &replicas[0], black_box(&reply), CONTEXT)
                .unwrap(),
        );
    });
    let shares: Vec<(usize, Share)> = (0..t)
        .map(|i| (i, keys[i].open_share(&sealed, i).unwrap()))
        .collect();
    assert_eq!(combine(&sealed, AAD, &shares).unwrap().plaintext, plaintext);
    let combine_time = time(&mut || {
        black_box(combine(black_box(&sealed), AAD, &shares).unwrap());
    });
    PathCost {
        seal: seal_time,
        open_share,
        reseal_share,
        open_reply,
        combine: combine_time,
    }
}

fn main() {
    let groups = [(4, 2), (16, 6)];
    println!("Shamir over GF(256), 32-byte key: vsss-rs 6 and blahaj 0.7 in the same run\n");
    println!(
        "| operation | n, t | vsss-rs µs/op | vsss-rs ops/s | blahaj µs/op | blahaj ops/s | \
         blahaj time / vsss-rs time |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut costs = Vec::new();
    for (n, t) in groups {
        let cost = sharing_cost(n, t);
        for (name, vsss, blahaj) in [
            ("split into n shares", cost.vsss_split, cost.blahaj_split),
            ("combine t shares", cost.vsss_combine, cost.blahaj_combine),
        ] {
            println!(
                "| {name} | {n}, {t} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} |",
                us(vsss),
                ops(vsss),
                us(blahaj),
                ops(blahaj),
                blahaj.as_secs_f64() / vsss.as_secs_f64()
            );
        }
        costs.push(cost);
    }

    println!("\nSealing and reading a 64-byte private field (tagma_crypto::sealing, vsss-rs)\n");
    println!("| step | n, t | µs/op | ops/s |");
    println!("|---|---|---|---|");
    for ((n, t), sharing) in groups.into_iter().zip(&costs) {
        let path = path_cost(n, t);
        let read = path.open_reply * t as u32 + path.combine;
        let replica = path.open_share + path.reseal_share;
        let rows = [
            ("writer: seal", path.seal),
            ("replica: open_share", path.open_share),
            ("replica: reseal_share", path.reseal_share),
            ("replica: both (per read, per replica)", replica),
            ("reader: open_reply (one reply)", path.open_reply),
            ("reader: combine t shares and decrypt", path.combine),
            ("reader: t replies and combine", read),
        ];
        for (name, d) in rows {
            println!("| {name} | {n}, {t} | {:.2} | {:.0} |", us(d), ops(d));
        }
        // The paths differ between the crates only in split (writer) and combine (reader).
        let seal_blahaj = path.seal.saturating_sub(sharing.vsss_split) + sharing.blahaj_split;
        let read_blahaj = read.saturating_sub(sharing.vsss_combine) + sharing.blahaj_combine;
        println!(
            "| writer: seal, with blahaj's split instead (derived) | {n}, {t} | {:.2} | {:.0} |",
            us(seal_blahaj),
            ops(seal_blahaj)
        );
        println!(
            "| reader: t replies and combine, with blahaj's combine instead (derived) | {n}, {t} \
             | {:.2} | {:.0} |",
            us(read_blahaj),
            ops(read_blahaj)
        );
    }
}
