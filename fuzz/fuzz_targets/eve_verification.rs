//! The execute-verify verifiers' decoders: an executor's request (VERIFY, complaint, query),
//! a decision, and the verifiers' whole state (their snapshot) must reject garbage without
//! panicking; requests and decisions they accept re-encode to the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagma_eve::verify::{
    Decision, Verification, VerifierRequest, decode_request, encode_complaint, encode_query,
    encode_verify,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = decode_request(data) {
        let again = match request {
            VerifierRequest::Verify {
                view,
                seq,
                token,
                previous,
            } => encode_verify(view, seq, token, previous),
            VerifierRequest::Complain { view } => encode_complaint(view),
            VerifierRequest::Query { seq } => encode_query(seq),
        };
        assert_eq!(again, data, "non-canonical request accepted");
    }
    if let Ok(decision) = Decision::decode(data) {
        assert_eq!(decision.encode(), data, "non-canonical decision accepted");
    }
    if let Ok(state) = Verification::decode(data) {
        // Whatever state is accepted encodes and decodes to itself.
        assert_eq!(Verification::decode(&state.encode()).as_ref(), Ok(&state));
    }
});
