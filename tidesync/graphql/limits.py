"""Request limits checked before execution: selection depth, aliases, estimated cost and page
sizes, counted through every fragment spread (each spread counts again).

Fragments are measured once each and reused, so a document of nested spreads costs linear
time to check however much it would expand to.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLType,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
    VariableNode,
)

from tidesync.graphql.errors import ErrorReason, PageTooLarge, limit_error

LIST_ESTIMATE = 10
"""How many items a list without a `first` argument is assumed to hold (evidence, columns)."""

PAGE_SIZE_ARGUMENT = "first"


@dataclass(frozen=True)
class QueryLimits:
    max_depth: int = 10
    max_aliases: int = 15
    max_cost: int = 20_000
    default_page_size: int = 50
    max_page_size: int = 200

    def page_size(self, first: int | None) -> int:
        """The page size a list returns for `first`; refuses sizes outside 1..max."""
        if first is None:
            return self.default_page_size
        if not 1 <= first <= self.max_page_size:
            raise PageTooLarge(f"first must be 1..{self.max_page_size}")
        return first


@dataclass(frozen=True)
class Measure:
    depth: int = 0
    aliases: int = 0
    cost: int = 0

    def __add__(self, other: Measure) -> Measure:
        return Measure(max(self.depth, other.depth), self.aliases + other.aliases,
                       self.cost + other.cost)


class _Meter:
    """Measures selection sets of one document, memoizing fragments."""

    def __init__(self, schema: GraphQLSchema, limits: QueryLimits,
                 fragments: dict[str, FragmentDefinitionNode]) -> None:
        self.schema, self.limits, self.fragments = schema, limits, fragments
        self.memo: dict[str, Measure] = {}
        self.in_progress: set[str] = set()
        self.page_errors: list[str] = []

    def selections(self, selection_set: SelectionSetNode | None,
                   parent: GraphQLType | None) -> Measure:
        total = Measure()
        if selection_set is None:
            return total
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                total += self.field(selection, parent)
            elif isinstance(selection, InlineFragmentNode):
                condition = (self.schema.get_type(selection.type_condition.name.value)
                             if selection.type_condition else parent)
                total += self.selections(selection.selection_set, condition)
            elif isinstance(selection, FragmentSpreadNode):
                total += self.fragment(selection.name.value)
        return total

    def fragment(self, name: str) -> Measure:
        if name in self.memo:
            return self.memo[name]
        definition = self.fragments.get(name)
        if definition is None or name in self.in_progress:
            return Measure()  # Unknown fragments and cycles are reported by the standard rules.
        self.in_progress.add(name)
        measure = self.selections(definition.selection_set,
                                  self.schema.get_type(definition.type_condition.name.value))
        self.in_progress.discard(name)
        self.memo[name] = measure
        return measure

    def field(self, node: FieldNode, parent: GraphQLType | None) -> Measure:
        alias = 1 if node.alias else 0
        if node.name.value.startswith("__"):
            return Measure(0, alias, 0)  # Introspection is allowed or refused as a whole.
        definition = None
        if isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
            definition = parent.fields.get(node.name.value)
        if definition is None:
            return Measure(1, alias, 1)  # An unknown field: the standard rules report it.
        inner = self.selections(node.selection_set, _named(definition.type))
        multiplier = self.multiplier(node, definition.type, parent)
        return Measure(inner.depth + 1, inner.aliases + alias, 1 + multiplier * inner.cost)

    def multiplier(self, node: FieldNode, field_type: GraphQLType,
                   parent: GraphQLType | None) -> int:
        argument = next((a for a in node.arguments or () if a.name.value == PAGE_SIZE_ARGUMENT),
                        None)
        if argument is not None:
            if isinstance(argument.value, IntValueNode):
                size = int(argument.value.value)
                if not 1 <= size <= self.limits.max_page_size:
                    self.page_errors.append(f"first must be 1..{self.limits.max_page_size}")
                return max(1, min(size, self.limits.max_page_size))
            if isinstance(argument.value, VariableNode):
                return self.limits.max_page_size  # Unknown until execution: assume the most.
        if _is_list(field_type):
            # The items of a page are already counted by its `first`.
            on_page = (isinstance(parent, GraphQLObjectType) and "pageInfo" in parent.fields)
            return 1 if on_page else LIST_ESTIMATE
        if _has_page_size_argument(node, parent):
            return self.limits.default_page_size
        return 1


def _has_page_size_argument(node: FieldNode, parent: GraphQLType | None) -> bool:
    if not isinstance(parent, GraphQLObjectType | GraphQLInterfaceType):
        return False
    definition = parent.fields.get(node.name.value)
    return definition is not None and PAGE_SIZE_ARGUMENT in definition.args


def _named(field_type: GraphQLType) -> GraphQLType:
    while isinstance(field_type, GraphQLNonNull | GraphQLList):
        field_type = field_type.of_type
    return field_type


def _is_list(field_type: GraphQLType) -> bool:
    if isinstance(field_type, GraphQLNonNull):
        field_type = field_type.of_type
    return isinstance(field_type, GraphQLList)


def measure_document(context: ValidationContext, limits: QueryLimits) -> list[GraphQLError]:
    """The limit violations of the document's operations."""
    document = context.document
    fragments = {d.name.value: d for d in document.definitions
                 if isinstance(d, FragmentDefinitionNode)}
    meter = _Meter(context.schema, limits, fragments)
    errors: list[GraphQLError] = []
    for definition in document.definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        root = context.schema.get_root_type(definition.operation)
        measure = meter.selections(definition.selection_set, root)
        errors += _violations(measure, limits)
    errors += [limit_error(ErrorReason.PAGE_TOO_LARGE, message)
               for message in sorted(set(meter.page_errors))]
    return errors


def _violations(measure: Measure, limits: QueryLimits) -> list[GraphQLError]:
    checks = [
        (measure.depth > limits.max_depth, ErrorReason.QUERY_TOO_DEEP,
         f"the query is {measure.depth} levels deep; at most {limits.max_depth} are allowed"),
        (measure.aliases > limits.max_aliases, ErrorReason.TOO_MANY_ALIASES,
         f"the query uses {measure.aliases} aliases; at most {limits.max_aliases} are allowed"),
        (measure.cost > limits.max_cost, ErrorReason.QUERY_TOO_COSTLY,
         f"the query's estimated cost is {measure.cost}; at most {limits.max_cost} is allowed"),
    ]
    return [limit_error(reason, message) for failed, reason, message in checks if failed]


def limits_rule(limits: QueryLimits) -> type[ValidationRule]:
    """A graphql-core validation rule enforcing `limits`."""

    class QueryLimitsRule(ValidationRule):
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(context)
            for error in measure_document(context, limits):
                context.report_error(error)

    return QueryLimitsRule
