// The element types: `diloco::scalar` (float or double), the codec each has
// on the wire, and the templates of the library that accept only those.
#include <boost/test/unit_test.hpp>

#include <cstdint>

#include <diloco/diloco.hpp>

#include "support/archetypes.hpp"

namespace concepts_scalar_test {

static_assert(diloco::scalar<float> && diloco::scalar<double>);
static_assert(!diloco::scalar<int> && !diloco::scalar<long double> && !diloco::scalar<const float> &&
              !diloco::scalar<float&>);

static_assert(diloco::same_scalar_type<diloco::inner::sgd<float>, diloco::outer::nesterov<float>>);
static_assert(!diloco::same_scalar_type<diloco::inner::sgd<float>, diloco::outer::nesterov<double>>);
static_assert(!diloco::same_scalar_type<archetypes::model_lacking<archetypes::model_req::scalar_type>,
                                        diloco::inner::sgd<float>>);

// Only float and double have a codec; every other type is refused at compile
// time (it used to be labelled f64).
template <class T>
concept has_codec = requires {
  diloco::codec_of<T>;
};
static_assert(has_codec<float> && has_codec<double>);
static_assert(!has_codec<int> && !has_codec<long double> && !has_codec<std::uint16_t> && !has_codec<char>);

// The runtime's templates and `outer::from_inner` are constrained by the
// concepts, each preceded by its check: a type that misses a requirement is a
// compile error naming it (tests/diagnostics/), not a quiet `false`, so only
// the accepted arguments can be asked about here. A scalar type that is not
// float or double is refused before any check runs.
template <class Inner>
concept from_inner_accepts = requires {
  typename diloco::outer::from_inner<Inner>;
};
static_assert(from_inner_accepts<diloco::inner::sgd<double>> && from_inner_accepts<diloco::inner::adamw<float>>);

template <class M, class S, class T>
concept learner_accepts = requires {
  typename diloco::learner<M, S, T>;
};
static_assert(
    learner_accepts<archetypes::model_archetype, archetypes::inner_archetype, archetypes::transport_archetype>);

template <class T, class Transport>
concept bootstrap_accepts = requires {
  typename diloco::bootstrap<T, Transport>;
};
static_assert(bootstrap_accepts<float, diloco::inproc::endpoint> && bootstrap_accepts<double, diloco::sim::endpoint>);
static_assert(!bootstrap_accepts<int, diloco::inproc::endpoint> &&
              !bootstrap_accepts<long double, diloco::sim::endpoint>);

template <class T>
concept presets_accept = requires {
  typename diloco::presets::data_parallel_inner<T>;
  typename diloco::presets::data_parallel_outer<T>;
  typename diloco::presets::diloco_inner<T>;
  typename diloco::presets::diloco_outer<T>;
};
static_assert(presets_accept<float> && presets_accept<double> && !presets_accept<int>);

// `sim::run` drives a syncer and learners whose endpoints tell when their
// next message arrives; the in-process endpoint does not.
static_assert(diloco::timed_transport<diloco::sim::endpoint>);
static_assert(!diloco::timed_transport<diloco::inproc::endpoint>);
using sim_syncer = diloco::syncer<diloco::outer::sgd<float>, diloco::merge::average, diloco::sim::endpoint>;
using inproc_syncer = diloco::syncer<diloco::outer::sgd<float>, diloco::merge::average, diloco::inproc::endpoint>;
static_assert(diloco::sim::driven_syncer<sim_syncer> && !diloco::sim::driven_syncer<inproc_syncer>);

BOOST_AUTO_TEST_SUITE(concepts_scalar)

BOOST_AUTO_TEST_CASE(codecs_of_float_and_double) {
  BOOST_TEST(static_cast<int>(diloco::codec_of<float>) == static_cast<int>(diloco::codec_id::f32));
  BOOST_TEST(static_cast<int>(diloco::codec_of<double>) == static_cast<int>(diloco::codec_id::f64));
  BOOST_TEST(static_cast<int>(diloco::codec_id::f32) == 1);  // the wire's numbers (docs/protocol.md)
  BOOST_TEST(static_cast<int>(diloco::codec_id::f64) == 2);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace concepts_scalar_test
