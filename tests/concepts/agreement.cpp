// Each concept and its check (`check_model`, ...) walk the same named
// requirements (include/diloco/concepts/). Here, the silent form of each
// check (`on_unmet::return_false`) must give the concept's verdict on every
// archetype and on every variant that lacks one requirement, and each variant
// must miss exactly the named requirement it is built to miss (and none
// before it, so the check's message, which names the first one it misses, is
// that requirement's). A requirement added to a concept but not to its check,
// or the other way round, fails here; the messages themselves are held by
// the compile-fail tests in tests/diagnostics/.
#include <boost/test/unit_test.hpp>

#include <sstream>
#include <string>

#include <diloco/diloco.hpp>

#include "support/archetypes.hpp"

namespace concepts_agreement_test {

using namespace archetypes;
namespace req = diloco::requirements;
constexpr auto quiet = diloco::on_unmet::return_false;

template <class M>
constexpr bool model_agrees = diloco::model<M> == diloco::check_model<M, quiet>();
template <class S>
constexpr bool inner_step_agrees = diloco::inner_step<S> == diloco::check_inner_step<S, quiet>();
template <class O>
constexpr bool outer_optimizer_agrees = diloco::outer_optimizer<O> == diloco::check_outer_optimizer<O, quiet>();
template <class P, class T>
constexpr bool merge_policy_agrees = diloco::merge_policy<P, T> == diloco::check_merge_policy<P, T, quiet>();
template <class T>
constexpr bool transport_agrees = diloco::transport<T> == diloco::check_transport<T, quiet>() &&
                                  diloco::blocking_transport<T> == diloco::check_blocking_transport<T, quiet>();
template <class C>
constexpr bool collective_agrees = diloco::collective<C> == diloco::check_collective<C, quiet>();
template <class C>
constexpr bool checkpointable_agrees = diloco::checkpointable<C> == diloco::check_checkpointable<C, quiet>();

// ---------------------------------------------------------------------------
// The archetypes: both say yes, and the failing form of each check compiles.

static_assert(diloco::check_model<model_archetype, quiet>() && diloco::check_model<model_archetype>());
static_assert(diloco::check_inner_step<inner_archetype, quiet>() && diloco::check_inner_step<inner_archetype>());
static_assert(diloco::check_outer_optimizer<outer_archetype, quiet>() &&
              diloco::check_outer_optimizer<outer_archetype>());
static_assert(diloco::check_merge_policy<merge_archetype, float, quiet>() &&
              diloco::check_merge_policy<merge_archetype, float>());
static_assert(diloco::check_transport<transport_archetype, quiet>() && diloco::check_transport<transport_archetype>());
static_assert(!diloco::check_blocking_transport<transport_archetype, quiet>());
static_assert(diloco::check_blocking_transport<blocking_transport_archetype, quiet>() &&
              diloco::check_blocking_transport<blocking_transport_archetype>());
static_assert(diloco::check_checkpointable<checkpointable_archetype, quiet>() &&
              diloco::check_checkpointable<checkpointable_archetype>());
static_assert(diloco::check_collective<collective_archetype, quiet>() &&
              diloco::check_collective<collective_archetype>());
// An outer optimizer is checkpointable; the outer archetype is the smallest one.
static_assert(diloco::check_checkpointable<outer_archetype, quiet>());

static_assert(model_agrees<model_archetype>);
static_assert(inner_step_agrees<inner_archetype>);
static_assert(outer_optimizer_agrees<outer_archetype>);
static_assert(merge_policy_agrees<merge_archetype, float>);
static_assert(transport_agrees<transport_archetype>);
static_assert(transport_agrees<blocking_transport_archetype>);
static_assert(checkpointable_agrees<checkpointable_archetype>);
static_assert(checkpointable_agrees<outer_archetype>);

// And the variants that have every requirement.
static_assert(diloco::model<model_lacking<model_req::none>> && model_agrees<model_lacking<model_req::none>>);
static_assert(diloco::inner_step<inner_lacking<inner_req::none>> && inner_step_agrees<inner_lacking<inner_req::none>>);
static_assert(diloco::outer_optimizer<outer_lacking<outer_req::none>> &&
              outer_optimizer_agrees<outer_lacking<outer_req::none>>);
static_assert(diloco::merge_policy<merge_lacking<merge_req::none>, float> &&
              merge_policy_agrees<merge_lacking<merge_req::none>, float>);
static_assert(diloco::blocking_transport<transport_lacking<transport_req::none>> &&
              transport_agrees<transport_lacking<transport_req::none>>);
static_assert(diloco::checkpointable<checkpointable_lacking<checkpointable_req::none>> &&
              checkpointable_agrees<checkpointable_lacking<checkpointable_req::none>>);

// ---------------------------------------------------------------------------
// One variant per requirement: it misses that named requirement and no
// earlier one, and the concept and its check both say no.

namespace rm = diloco::requirements::model;
namespace ri = diloco::requirements::inner_step;
namespace ro = diloco::requirements::outer_optimizer;
namespace rc = diloco::requirements::checkpointable;
namespace rp = diloco::requirements::merge_policy;
namespace rt = diloco::requirements::transport;

template <class M>
constexpr bool model_refused = !diloco::model<M> && model_agrees<M>;

static_assert(!rm::scalar_type<model_lacking<model_req::scalar_type>>);
static_assert(model_refused<model_lacking<model_req::scalar_type>>);

static_assert(rm::scalar_type<model_lacking<model_req::batch_type>> &&
              !rm::batch_type<model_lacking<model_req::batch_type>>);
static_assert(model_refused<model_lacking<model_req::batch_type>>);

static_assert(rm::scalar_type<model_lacking<model_req::layout>> && rm::batch_type<model_lacking<model_req::layout>> &&
              !rm::layout<model_lacking<model_req::layout>>);
static_assert(model_refused<model_lacking<model_req::layout>>);

template <model_req R>
constexpr bool model_first_three =
    rm::scalar_type<model_lacking<R>>&& rm::batch_type<model_lacking<R>>&& rm::layout<model_lacking<R>>;

static_assert(model_first_three<model_req::parameters> && !rm::parameters<model_lacking<model_req::parameters>>);
static_assert(model_refused<model_lacking<model_req::parameters>>);

static_assert(model_first_three<model_req::gradients> && rm::parameters<model_lacking<model_req::gradients>> &&
              !rm::gradients<model_lacking<model_req::gradients>>);
static_assert(model_refused<model_lacking<model_req::gradients>>);

static_assert(model_first_three<model_req::compute_gradients> &&
              rm::parameters<model_lacking<model_req::compute_gradients>> &&
              rm::gradients<model_lacking<model_req::compute_gradients>> &&
              !rm::compute_gradients<model_lacking<model_req::compute_gradients>>);
static_assert(model_refused<model_lacking<model_req::compute_gradients>>);

// An integer scalar type: refused by requirement 1 alone.
static_assert(!rm::scalar_type<model_with_integer_scalar> && rm::batch_type<model_with_integer_scalar> &&
              rm::layout<model_with_integer_scalar> && rm::parameters<model_with_integer_scalar> &&
              rm::gradients<model_with_integer_scalar> && rm::compute_gradients<model_with_integer_scalar>);
static_assert(model_refused<model_with_integer_scalar>);

template <class S>
constexpr bool inner_step_refused = !diloco::inner_step<S> && inner_step_agrees<S>;

static_assert(!ri::scalar_type<inner_lacking<inner_req::scalar_type>>);
static_assert(inner_step_refused<inner_lacking<inner_req::scalar_type>>);

static_assert(ri::scalar_type<inner_lacking<inner_req::options_type>> &&
              !ri::options_type<inner_lacking<inner_req::options_type>>);
static_assert(inner_step_refused<inner_lacking<inner_req::options_type>>);

static_assert(ri::scalar_type<inner_lacking<inner_req::step>> && ri::options_type<inner_lacking<inner_req::step>> &&
              !ri::step<inner_lacking<inner_req::step>>);
static_assert(inner_step_refused<inner_lacking<inner_req::step>>);

static_assert(ri::scalar_type<inner_lacking<inner_req::options>> &&
              ri::options_type<inner_lacking<inner_req::options>> && ri::step<inner_lacking<inner_req::options>> &&
              !ri::options<inner_lacking<inner_req::options>>);
static_assert(inner_step_refused<inner_lacking<inner_req::options>>);

using immovable_inner = inner_lacking<inner_req::move_constructible>;
static_assert(ri::scalar_type<immovable_inner> && ri::options_type<immovable_inner> && ri::step<immovable_inner> &&
              ri::options<immovable_inner> && !ri::move_constructible<immovable_inner>);
static_assert(inner_step_refused<immovable_inner>);

// The decision the concept and its check once disagreed on: an inner step
// over `int` (the concept accepted it, the check refused it). Both refuse it
// now, by requirement 1 alone: parameters and gradients are real numbers,
// and the wire has no codec for integers.
static_assert(!ri::scalar_type<inner_with_integer_scalar> && ri::options_type<inner_with_integer_scalar> &&
              ri::step<inner_with_integer_scalar> && ri::options<inner_with_integer_scalar> &&
              ri::move_constructible<inner_with_integer_scalar>);
static_assert(inner_step_refused<inner_with_integer_scalar>);

template <class O>
constexpr bool outer_optimizer_refused = !diloco::outer_optimizer<O> && outer_optimizer_agrees<O>;

static_assert(!ro::scalar_type<outer_lacking<outer_req::scalar_type>>);
static_assert(outer_optimizer_refused<outer_lacking<outer_req::scalar_type>>);

static_assert(ro::scalar_type<outer_lacking<outer_req::options_type>> &&
              !ro::options_type<outer_lacking<outer_req::options_type>>);
static_assert(outer_optimizer_refused<outer_lacking<outer_req::options_type>>);

template <outer_req R>
constexpr bool outer_first_two = ro::scalar_type<outer_lacking<R>>&& ro::options_type<outer_lacking<R>>;

static_assert(outer_first_two<outer_req::step> && !ro::step<outer_lacking<outer_req::step>>);
static_assert(outer_optimizer_refused<outer_lacking<outer_req::step>>);

static_assert(outer_first_two<outer_req::reset> && ro::step<outer_lacking<outer_req::reset>> &&
              !ro::reset<outer_lacking<outer_req::reset>>);
static_assert(outer_optimizer_refused<outer_lacking<outer_req::reset>>);

static_assert(outer_first_two<outer_req::save> && ro::step<outer_lacking<outer_req::save>> &&
              ro::reset<outer_lacking<outer_req::save>> && !rc::save<outer_lacking<outer_req::save>>);
static_assert(outer_optimizer_refused<outer_lacking<outer_req::save>>);

static_assert(outer_first_two<outer_req::load> && ro::step<outer_lacking<outer_req::load>> &&
              ro::reset<outer_lacking<outer_req::load>> && rc::save<outer_lacking<outer_req::load>> &&
              !rc::load<outer_lacking<outer_req::load>>);
static_assert(outer_optimizer_refused<outer_lacking<outer_req::load>>);

using immovable_outer = outer_lacking<outer_req::move_constructible>;
static_assert(outer_first_two<outer_req::move_constructible> && ro::step<immovable_outer> &&
              ro::reset<immovable_outer> && diloco::checkpointable<immovable_outer> &&
              !ro::move_constructible<immovable_outer>);
static_assert(outer_optimizer_refused<immovable_outer>);

static_assert(!ro::scalar_type<outer_with_integer_scalar> && ro::options_type<outer_with_integer_scalar> &&
              ro::step<outer_with_integer_scalar> && ro::reset<outer_with_integer_scalar> &&
              diloco::checkpointable<outer_with_integer_scalar> && ro::move_constructible<outer_with_integer_scalar>);
static_assert(outer_optimizer_refused<outer_with_integer_scalar>);

template <class P>
constexpr bool merge_policy_refused = !diloco::merge_policy<P, float> && merge_policy_agrees<P, float>;

static_assert(!rp::weight<merge_lacking<merge_req::weight>>);
static_assert(merge_policy_refused<merge_lacking<merge_req::weight>>);
static_assert(rp::weight<merge_lacking<merge_req::merge>> && !rp::merge<merge_lacking<merge_req::merge>, float>);
static_assert(merge_policy_refused<merge_lacking<merge_req::merge>>);
using immovable_merge = merge_lacking<merge_req::move_constructible>;
static_assert(rp::weight<immovable_merge> && rp::merge<immovable_merge, float> &&
              !rp::move_constructible<immovable_merge>);
static_assert(merge_policy_refused<immovable_merge>);
// A policy for float is not one for double: requirement 2 is per scalar type.
static_assert(!diloco::merge_policy<merge_lacking<merge_req::none>, double> &&
              merge_policy_agrees<merge_lacking<merge_req::none>, double>);

static_assert(!rt::try_send<transport_lacking<transport_req::try_send>>);
static_assert(!diloco::transport<transport_lacking<transport_req::try_send>> &&
              transport_agrees<transport_lacking<transport_req::try_send>>);
static_assert(rt::try_send<transport_lacking<transport_req::try_receive>> &&
              !rt::try_receive<transport_lacking<transport_req::try_receive>>);
static_assert(!diloco::transport<transport_lacking<transport_req::try_receive>> &&
              transport_agrees<transport_lacking<transport_req::try_receive>>);
// Without `receive_for` a transport is still a transport, not a blocking one.
static_assert(rt::try_send<transport_lacking<transport_req::receive_for>> &&
              rt::try_receive<transport_lacking<transport_req::receive_for>> &&
              !rt::receive_for<transport_lacking<transport_req::receive_for>>);
static_assert(diloco::transport<transport_lacking<transport_req::receive_for>> &&
              !diloco::blocking_transport<transport_lacking<transport_req::receive_for>> &&
              transport_agrees<transport_lacking<transport_req::receive_for>>);

static_assert(!rc::save<checkpointable_lacking<checkpointable_req::save>>);
static_assert(!diloco::checkpointable<checkpointable_lacking<checkpointable_req::save>> &&
              checkpointable_agrees<checkpointable_lacking<checkpointable_req::save>>);
static_assert(rc::save<checkpointable_lacking<checkpointable_req::load>> &&
              !rc::load<checkpointable_lacking<checkpointable_req::load>>);
static_assert(!diloco::checkpointable<checkpointable_lacking<checkpointable_req::load>> &&
              checkpointable_agrees<checkpointable_lacking<checkpointable_req::load>>);

// Collective: each variant misses exactly its requirement, and none before it.
namespace rcol = diloco::requirements::collective;
static_assert(diloco::collective<collective_lacking<collective_req::none>> &&
              collective_agrees<collective_lacking<collective_req::none>>);
static_assert(!rcol::rank_and_size<collective_lacking<collective_req::rank_and_size>> &&
              collective_agrees<collective_lacking<collective_req::rank_and_size>>);
static_assert(rcol::rank_and_size<collective_lacking<collective_req::all_reduce>> &&
              !rcol::all_reduce<collective_lacking<collective_req::all_reduce>> &&
              collective_agrees<collective_lacking<collective_req::all_reduce>>);
static_assert(rcol::all_reduce<collective_lacking<collective_req::reduce_scatter>> &&
              !rcol::reduce_scatter<collective_lacking<collective_req::reduce_scatter>> &&
              collective_agrees<collective_lacking<collective_req::reduce_scatter>>);
static_assert(rcol::reduce_scatter<collective_lacking<collective_req::all_gather>> &&
              !rcol::all_gather<collective_lacking<collective_req::all_gather>> &&
              collective_agrees<collective_lacking<collective_req::all_gather>>);
static_assert(rcol::all_gather<collective_lacking<collective_req::broadcast>> &&
              !rcol::broadcast<collective_lacking<collective_req::broadcast>> &&
              collective_agrees<collective_lacking<collective_req::broadcast>>);
static_assert(rcol::broadcast<collective_lacking<collective_req::barrier>> &&
              !rcol::barrier<collective_lacking<collective_req::barrier>> &&
              collective_agrees<collective_lacking<collective_req::barrier>>);

// ---------------------------------------------------------------------------
// The library's own types.

static_assert(model_agrees<diloco::inner::sgd<float>>);  // not a model: both say no
static_assert(inner_step_agrees<diloco::inner::sgd<float>> && inner_step_agrees<diloco::inner::adamw<double>>);
static_assert(outer_optimizer_agrees<diloco::outer::nesterov<float>> &&
              outer_optimizer_agrees<diloco::outer::delayed_nesterov<double>> &&
              outer_optimizer_agrees<diloco::outer::from_inner<diloco::inner::adamw<float>>>);
static_assert(merge_policy_agrees<diloco::merge::average, float> &&
              merge_policy_agrees<diloco::merge::coordinate_median<>, double>);
static_assert(transport_agrees<diloco::inproc::endpoint> && transport_agrees<diloco::sim::endpoint>);
static_assert(collective_agrees<diloco::threads::communicator> && collective_agrees<collective_archetype>);
static_assert(checkpointable_agrees<diloco::inner::adamw<float>> && checkpointable_agrees<diloco::outer::sgd<double>>);

// ---------------------------------------------------------------------------
// memory_space, and the optional memory of a model (requirement 7).
template <class S, class T>
constexpr bool memory_space_agrees = diloco::memory_space<S, T> == diloco::check_memory_space<S, T, quiet>();

enum class space_req { buffer, encode_delta, adopt, scatter, gather, copies, pack };
/// host_memory with one requirement's member hidden by a deleted one.
template <space_req R>
struct space_lacking;
template <>
struct space_lacking<space_req::buffer> : diloco::host_memory {
  void allocate() = delete;
};
template <>
struct space_lacking<space_req::encode_delta> : diloco::host_memory {
  void encode_delta() = delete;
};
template <>
struct space_lacking<space_req::adopt> : diloco::host_memory {
  void adopt() = delete;
};
template <>
struct space_lacking<space_req::scatter> : diloco::host_memory {
  void scatter() = delete;
};
template <>
struct space_lacking<space_req::gather> : diloco::host_memory {
  void gather() = delete;
};
template <>
struct space_lacking<space_req::copies> : diloco::host_memory {
  void write() = delete;
};
template <>
struct space_lacking<space_req::pack> : diloco::host_memory {
  void pack() = delete;
};

namespace rs = diloco::requirements::memory_space;
template <class S>
constexpr bool space_refused = !diloco::memory_space<S, float> && memory_space_agrees<S, float>;

static_assert(memory_space_agrees<diloco::host_memory, float> && memory_space_agrees<diloco::host_memory, double>);
static_assert(diloco::memory_space<diloco::host_memory, double>);
static_assert(!rs::buffer<space_lacking<space_req::buffer>, float> && space_refused<space_lacking<space_req::buffer>>);
static_assert(rs::buffer<space_lacking<space_req::encode_delta>, float> &&
              !rs::encode_delta<space_lacking<space_req::encode_delta>, float> &&
              space_refused<space_lacking<space_req::encode_delta>>);
static_assert(rs::encode_delta<space_lacking<space_req::adopt>, float> &&
              !rs::adopt<space_lacking<space_req::adopt>, float> && space_refused<space_lacking<space_req::adopt>>);
static_assert(rs::adopt<space_lacking<space_req::scatter>, float> &&
              !rs::scatter<space_lacking<space_req::scatter>, float> &&
              space_refused<space_lacking<space_req::scatter>>);
static_assert(rs::scatter<space_lacking<space_req::gather>, float> &&
              !rs::gather<space_lacking<space_req::gather>, float> && space_refused<space_lacking<space_req::gather>>);
static_assert(rs::gather<space_lacking<space_req::copies>, float> &&
              !rs::copies<space_lacking<space_req::copies>, float> && space_refused<space_lacking<space_req::copies>>);
static_assert(rs::copies<space_lacking<space_req::pack>, float> && !rs::pack<space_lacking<space_req::pack>, float> &&
              space_refused<space_lacking<space_req::pack>>);

/// A model that names its memory: a memory space is taken, anything else
/// refused at requirement 7 with 1 to 6 met.
struct model_in_host_memory : model_lacking<model_req::none> {
  diloco::host_memory& memory();
};
struct model_in_strange_memory : model_lacking<model_req::none> {
  int& memory();
};
struct model_with_memory_by_value : model_lacking<model_req::none> {
  diloco::host_memory memory();
};
static_assert(diloco::model<model_in_host_memory> && model_agrees<model_in_host_memory>);
static_assert(std::is_same_v<diloco::memory_space_of<model_in_host_memory>, diloco::host_memory>);
static_assert(rm::compute_gradients<model_in_strange_memory> && !rm::memory<model_in_strange_memory> &&
              model_refused<model_in_strange_memory>);
static_assert(!rm::memory<model_with_memory_by_value> && model_refused<model_with_memory_by_value>);

BOOST_AUTO_TEST_SUITE(concepts_agreement)

// The checkpointable archetype's behaviour, which the docs promise of every
// checkpointable type: `load` of what `save` wrote restores the state, and a
// corrupt stream throws and leaves the state as it was.
BOOST_AUTO_TEST_CASE(checkpointable_archetype_round_trips_and_refuses_corrupt_input) {
  const checkpointable_archetype saved(-42);
  std::stringstream stream;
  saved.save(stream);
  BOOST_TEST(stream.str() == "-42\n");

  checkpointable_archetype restored(7);
  restored.load(stream);
  BOOST_TEST(restored.value() == -42);

  std::istringstream corrupt("12x\n");
  BOOST_CHECK_THROW(restored.load(corrupt), diloco::corrupt_state);
  BOOST_TEST(restored.value() == -42);
  std::istringstream empty("");
  BOOST_CHECK_THROW(restored.load(empty), diloco::corrupt_state);
  BOOST_TEST(restored.value() == -42);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace concepts_agreement_test
